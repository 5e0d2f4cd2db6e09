"""`trainsim simulate --json --no-report` imports only what it runs: no plotting, graph library,
terminal tables or profiler plugins (they were ~0.25 s of every run), no pandas (the Timeline's
frame is built by the features that read it: ~0.15 s), no SimPy, flow network or sweep when the
list engine runs, no numba for a small graph, no numpy.ma (numpy loads it at the first plain
`np.unique`); `--report` still writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import contextlib, io, json, sys
from sim.cli.main import main
argv, cut = sys.argv[1:], sys.argv.index("--heavy") - 1 if "--heavy" in sys.argv else len(sys.argv)
argv, extra = argv[:cut], argv[cut + 1:]  # after --heavy: more modules the run must not import
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(argv)
tops = ("plotly", "networkx", "rich", "profiler", "simpy", "numba", "pandas")
heavy = (*tops, "sim.report.simulation", "sim.chrome_trace", "sim.flow.transport", "sim.explore.sweep", "numpy.ma.core",
         *extra)
print(json.dumps({"code": code, "json": json.loads(out.getvalue()) if "--json" in argv else None,
                  "loaded": sorted({m.split(".")[0] if m.split(".")[0] in tops
                                    else m for m in sys.modules if m.startswith(heavy)})}))
"""


def _run(*argv: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_simulate_json_imports_no_report_plotting_or_plugins() -> None:
    r = _run("simulate", "--json", "--no-report", "--microbatches", "2")
    assert r["code"] == 0 and r["json"]["step_time_s"] > 0
    assert r["loaded"] == []


@pytest.mark.parametrize("argv", [("--json",), ()], ids=["json", "text"])
def test_the_default_simulation_imports_no_pandas(argv: tuple[str, ...]) -> None:
    r = _run("simulate", "--no-report", *argv)  # the default job: a steady-state extended step
    assert r["code"] == 0 and "pandas" not in r["loaded"]  # the text tables load rich


def test_a_multi_node_job_imports_no_numpy_ma() -> None:  # NCCL's channels per node: no plain np.unique
    r = _run("simulate", "--json", "--no-report", "--model", "gpt3-1.7b", "--cluster", "dgx-a100", "--nodes", "4",
             "--tp", "1", "--pp", "1", "--dp", "32", "--global-batch", "512", "--microbatch-size", "1")
    assert r["code"] == 0 and r["loaded"] == []


# what the default job does not run: the other pipeline schedules, and TOML (it reads no file)
NOT_RUN = tuple(f"schedules.pipeline.{m}" for m in ("gpipe", "interleaved", "interleaved_zb", "zb_h1", "zbv",
                                                    "dualpipev", "looped")) + ("tomllib",)


def test_the_default_job_imports_no_other_pipeline_schedule_nor_toml() -> None:
    r = _run("simulate", "--json", "--no-report", "--heavy", *NOT_RUN)
    assert r["code"] == 0 and r["loaded"] == []
    r = _run("simulate", "--json", "--no-report", "--schedule", "interleaved", "--vpp", "2", "--heavy", *NOT_RUN)
    assert r["code"] == 0 and r["loaded"] == ["schedules.pipeline.interleaved", "schedules.pipeline.looped"]


@pytest.mark.slow  # a subprocess
def test_simulate_report_still_imports_plotly_and_writes(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    r = _run("simulate", "--microbatches", "2", "--report", str(path))
    assert r["code"] == 0
    assert "plotly" in r["loaded"] and "pandas" in r["loaded"] and path.stat().st_size > 20_000 and "Plotly.newPlot" in path.read_text()
    assert len(list((tmp_path / "trainsim-assets").glob("plotly-*.min.js"))) == 1


def test_an_explore_usage_error_loads_no_report_plotting() -> None:
    """explore's report module (plotly, pandas, the engine) is loaded by the runs that write a
    report; a usage error (here: no --model) answers without it."""
    r = _run("explore", "--out", "unused-dir")
    assert r["code"] == 2
    assert not {"plotly", "pandas", "simpy", "sim.report.simulation"} & set(r["loaded"])


@pytest.mark.parametrize("argv", [("schedule", "--pp", "x"), ("compare", "--tp", "four")], ids=["schedule", "compare"])
def test_a_usage_error_loads_no_report_plotting(argv: tuple[str, ...]) -> None:
    """schedule's and compare's report modules are loaded by the runs that write a report."""
    r = _run(*argv)
    assert r["code"] == 2
    assert not {"plotly", "pandas", "sim.report.simulation"} & set(r["loaded"])
