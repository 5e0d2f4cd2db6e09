"""Fuzz the command line (issue 15): hypothesis draws flags of ``simulate``, ``compare``,
``schedule`` and ``explore`` (every flag each parser has, read from the parsers) and job files of
every key, and runs them in-process. Each run must end as

- exit 0 with sane numbers (finite, positive step time, MFU in (0, 1), memory >= 0), or
- exit 2 with exactly one line on stderr (a user error, no traceback);

never exit 1 (a trainsim bug), another code, or a hang (SIGALRM guard). The size guard's budget
is lowered to 256 MiB so that the largest accepted run stays a few seconds (above it: exit 2).
Derandomized: the same cases run every time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.size_guard as size_guard
from profiler.validate.published.rows import DOCUMENTATION as ROW_DOCUMENTATION
from profiler.validate.published.rows import RULES as ROW_RULES
from schedules.model_presets import _PRESETS as MODEL_PRESETS
from schedules.moe_presets import moe_presets
from schedules.plan.layout import SCHEDULE_NAMES
from sim.cli.main import build_parser, main
from sim.job_settings import BY_KEY, SETTINGS
from topo.cluster_presets import _PRESETS as CLUSTER_PRESETS

HANG_SECONDS = 60  # one case; the slowest accepted case takes a few seconds
SKIPPED_FLAGS = {"-h", "--help", "--dask", "--ray", "--resume", "--json", "--no-report", "--out", "--workers"}
LONG = "x" * 300

BASE = {  # small enough to run in well under a second; the fuzzed flags change it
    "simulate": ["--model", "tiny", "--json", "--no-report"],
    "compare": ["--model", "tiny", "--schedules", "1f1b,gpipe", "--json", "--no-report"],
    "schedule": ["--json"],
    "explore": ["--model", "tiny", "--cluster", "dgx-h100", "--gpus", "8", "--tp", "1,2", "--pp", "1", "--global-batch", "16",
                "--microbatch-size", "1", "--schedule", "1f1b", "--recompute", "none", "--zero", "0",
                "--no-report", "--workers", "1", "--json"],
}

INTS = st.one_of(st.integers(1, 8).map(str), st.integers(1, 8).map(str),
                 st.sampled_from(["0", "-1", "3", "16", "64", "1000", "1000000", str(10**12), str(10**30), "1e30",
                                  "2.5", "four", ""]))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["0", "0.5", "1", "2", "-1", "nan", "inf", "-inf", "1e30", "1e-30", "x"]))
TEXT = st.sampled_from(["", "a,b", LONG, "-1", "1e30", "nope", "1,2", "on,off", "x\u00e9y", "tp,cp,dp,pp",
                        "pp,dp,cp,tp", "tp,tp,dp,pp"])
NAMES: dict[str, st.SearchStrategy[str]] = {
    "model": st.sampled_from([*MODEL_PRESETS, *moe_presets(), "gpt-9", LONG]),
    "cluster": st.sampled_from([*CLUSTER_PRESETS, "dgx-h100:8", "dgx-h100:8,dgx-a100:16", "nope", LONG,
                                "missing.toml", "cluster.toml", "fifo.toml", "dir.toml"]),
    "schedule": st.sampled_from([*SCHEDULE_NAMES, "1f1b,interleaved", "gpipe,zbv", "2f2b", ""]),
    "profile": st.sampled_from(["missing.toml", LONG, "profiles/this-host.toml", "fifo.toml", "dir.toml"]),
    "report": st.sampled_from(["r.html", LONG + ".html", "no/such/dir/r.html"]),
    "chrome_trace": st.sampled_from(["t.json", LONG + ".json"]),
    "price": st.sampled_from(["dgx-h100=2/gpu-hour", "3", "nan", "x=y", "1e400", "dgx-h100=inf", "dgx-h100=-1",
                              "dgx-h100=1e400/node-hour"]),
}


def flag_actions(command: str) -> list[argparse.Action]:
    """Every optional flag of ``command``'s parser, but those that leave the sandbox."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[command]
    return [a for a in parser._actions if a.option_strings and not set(a.option_strings) & SKIPPED_FLAGS]


def values_for(action: argparse.Action) -> st.SearchStrategy[list[str]]:
    """argv pieces for one flag: valid values mostly, invalid ones often."""
    flag = st.sampled_from(action.option_strings)
    if action.nargs == 0:  # store_true / BooleanOptionalAction / store_const
        return flag.map(lambda f: [f])
    if action.choices is not None:
        value = st.one_of(st.sampled_from([str(c) for c in action.choices]), TEXT)
    elif action.dest in NAMES:
        value = st.one_of(NAMES[action.dest], TEXT)
    elif action.type is float or getattr(action.type, "__name__", "") == "time":
        value = FLOATS
    elif action.type is int or getattr(action.type, "__name__", "") == "integer":
        value = INTS
    else:
        value = st.one_of(INTS, TEXT)
    if action.nargs == "?":
        return st.one_of(flag.map(lambda f: [f]), st.tuples(flag, value).map(list))
    return st.tuples(flag, value).map(list)


def command_lines(command: str) -> st.SearchStrategy[list[str]]:
    """``command`` + its base + one to three fuzzed flags."""
    pieces = [values_for(a) for a in flag_actions(command)]
    return st.lists(st.one_of(pieces), min_size=1, max_size=3).map(
        lambda chosen: [command, *BASE[command], *(x for piece in chosen for x in piece)])


OUTCOMES: Counter[tuple[str, int]] = Counter()  # (command, exit code) of every fuzzed run


Limit = Callable[[int], AbstractContextManager[None]]  # the suite's time_limit fixture (root conftest.py)


def run(argv: list[str], limit: Limit) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with limit(HANG_SECONDS), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    OUTCOMES[argv[0], code] += 1
    return code, out.getvalue(), err.getvalue()


def finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_simulation(obj: dict[str, Any]) -> None:
    assert finite(obj["step_time_s"]) and obj["step_time_s"] > 0
    assert finite(obj["mfu"]) and 0 < obj["mfu"] < 1
    assert finite(obj["peak_memory_gib"]) and obj["peak_memory_gib"] >= 0
    assert all(finite(v) and v >= 0 for v in obj["memory_gib"].values())
    for key in ("tokens_per_s", "tflops_per_gpu", "bubble_fraction", "exposed_comm_fraction", "cost_per_step_usd"):
        assert finite(obj[key]) and obj[key] >= 0, key


def check_outcome(argv: list[str], code: int, out: str, err: str) -> None:
    """The issue's acceptance for one run."""
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
        return
    assert code == 0, (argv, code, err)
    if "--report" in argv or "--chrome-trace" in argv or not out.strip():
        return
    doc = json.loads(out)
    command = argv[0]
    if command == "simulate":
        check_simulation(doc)
    elif command == "compare":
        for obj in doc:
            check_simulation(obj)
    elif command == "schedule":
        for obj in doc if isinstance(doc, list) else [doc]:
            assert finite(obj["step_time"]) and obj["step_time"] > 0
            assert finite(obj["bubble_fraction"]) and 0 <= obj["bubble_fraction"] < 1
    else:
        for row in doc.get("best", []):
            assert all(finite(row[k]) and row[k] > 0 for k in ("step_time_s", "peak_memory_gib") if k in row)


@pytest.fixture(autouse=True)
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "profiles").symlink_to(Path(__file__).resolve().parents[2] / "profiles")
    os.mkfifo(tmp_path / "fifo.toml")  # special files where a TOML file is named: refused, never read
    (tmp_path / "dir.toml").mkdir()
    (tmp_path / "cluster.toml").write_bytes(b'\xef\xbb\xbfbase = "dgx-h100"\nnodes = 1\n')  # with a BOM
    monkeypatch.setattr(size_guard, "memory_budget_bytes", lambda: 256.0 * 2**20)


def fuzz(cases: int) -> settings:
    """Hypothesis settings: ``cases`` derandomized examples, no deadline, no example database.
    ``TRAINSIM_FUZZ_RANDOM=1`` draws other cases each run instead (with ``--hypothesis-seed=N``: those of seed N)."""
    return settings(max_examples=cases, derandomize=not os.environ.get("TRAINSIM_FUZZ_RANDOM"), deadline=None,
                    database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize(("command", "cases"), [pytest.param("simulate", 150, marks=pytest.mark.slow), ("simulate", 25),
                                                 ("compare", 25), ("schedule", 100), ("explore", 10)])
def test_command_lines(command: str, cases: int, time_limit: Limit) -> None:
    @fuzz(cases)
    @given(command_lines(command))
    def case(argv: list[str]) -> None:
        if command == "explore":
            argv = [*argv, "--out", f"sweep{abs(hash(tuple(argv)))}"]
        check_outcome(argv, *run(argv, time_limit))

    OUTCOMES.clear()
    case()
    # the fuzz reaches both outcomes: runs that succeed and inputs that are refused
    assert OUTCOMES[command, 0] >= cases // 10 and OUTCOMES[command, 2] >= cases // 10, OUTCOMES


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"


SCALARS = st.one_of(st.integers(1, 8), st.integers(1, 8), st.sampled_from([0, -1, 10**9, 10**18]), st.booleans(),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from(["no", "false", "four", "", LONG, "1f1b", "tiny", "dgx-h100", "fsdp2", "bf16"]))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.sampled_from(["a", "tp"]), SCALARS,
                                                                           max_size=2))
KEYS = st.sampled_from([*BY_KEY, ("plan", "tpp"), ("nope", "x")])
CANDIDATES = [1, 2, 4, 8, 0, 3, True, False, 0.0, 0.1, 2.5, "tiny", "dgx-h100", "tp,cp,dp,pp",
              *(c for setting in SETTINGS.values() for c in getattr(setting.rule, "values", ()))]


def valid_values(key: str) -> st.SearchStrategy[Any]:
    """Values the settings table accepts for ``key`` (from a list of candidates)."""
    ok = [v for v in CANDIDATES if SETTINGS[key].rule.accepts(v)] if key in SETTINGS else []
    return st.sampled_from(ok) if ok else VALUES


def entry(section_key: tuple[str, str]) -> st.SearchStrategy[tuple[tuple[str, str], Any]]:
    section, key = section_key
    name = BY_KEY.get((section, key), key)
    value = st.one_of(valid_values(name), valid_values(name), valid_values(name), VALUES)
    return value.map(lambda v: (section_key, v))


ENTRIES = st.lists(KEYS.flatmap(entry), min_size=1, max_size=4).map(dict)


BOM = b"\xef\xbb\xbf"  # a third of the job files start with a UTF-8 byte order mark


@pytest.mark.slow
def test_job_files(time_limit: Limit) -> None:
    @fuzz(80)
    @given(ENTRIES)
    def job_file_cases(entries: dict[tuple[str, str], Any]) -> None:
        sections: dict[str, dict[str, Any]] = {}
        for (section, key), value in entries.items():
            sections.setdefault(section, {})[key] = value
        sections.setdefault("model", {}).setdefault("model", "tiny")
        text = "".join(f"[{s}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in kv.items())
                       for s, kv in sections.items())
        Path("job.toml").write_bytes((BOM if len(text) % 3 == 0 else b"") + text.encode())
        argv = ["simulate", "--config", "job.toml", "--json", "--no-report"]
        check_outcome(argv, *run(argv, time_limit))

    OUTCOMES.clear()
    job_file_cases()
    assert OUTCOMES["simulate", 0] >= 5 and OUTCOMES["simulate", 2] >= 20, OUTCOMES


# Published rows (``validate --published FILE``): a small valid row, one to three keys changed, added or dropped.
ROW: dict[str, Any] = {"name": "a", "gpu": "H100 80GB", "gpus": 8, "framework": "Megatron-LM / Megatron-Core r0.8.0",
                       "layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 176, "ffn_kind": "swiglu", "vocab": 256,
                       "seq_len": 32, "tp": 2, "pp": 2, "dp": 2, "zero": 1, "microbatch_size": 1, "global_batch": 8,
                       "measured_step_s": 0.01}
DROP = object()  # the key is left out
ROW_CANDIDATES = [*CANDIDATES, 16, 64, 10**29, 10**6, 1e-3, 0.5, 1.0, 2.0, "A100 80GB", "fp8", "selective", "full",
                  "torchtitan (FSDP2)", "DeepSpeed ZeRO-3", "allocated", "reserved", ["not stated"], "derived", "a"]


def row_entry(key: str) -> st.SearchStrategy[tuple[str, Any]]:
    ok = [v for v in ROW_CANDIDATES if key in ROW_RULES and ROW_RULES[key].accepts(v)]
    valid = st.sampled_from(ok) if ok else SCALARS
    return st.one_of(valid, valid, SCALARS, st.just(DROP)).map(lambda v: (key, v))


ROWS = st.lists(st.sampled_from([*ROW_RULES, *ROW_DOCUMENTATION, "measured_stepp", "gpu_count"]).flatmap(row_entry),
                min_size=1, max_size=3).map(dict)


def check_published(argv: list[str], code: int, out: str, err: str) -> None:
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
        return
    assert code == 0, (argv, code, err)
    doc = json.loads(out)
    numbers: list[Any] = []
    for run_doc in doc["runs"]:
        numbers += [v for v in run_doc.values() if isinstance(v, float)]
        assert run_doc["skipped"] or run_doc["sim_step_s"] > 0, run_doc
    assert all(math.isfinite(x) for x in numbers), doc["runs"]


@pytest.mark.parametrize("cases", [pytest.param(40, id="fast"), pytest.param(300, id="long", marks=pytest.mark.slow)])
def test_published_rows(cases: int, time_limit: Limit) -> None:
    @fuzz(cases)
    @given(ROWS, st.booleans())
    def row_cases(changes: dict[str, Any], bom: bool) -> None:
        row = {k: v for k, v in {**ROW, **changes}.items() if v is not DROP}
        text = "[[run]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in row.items())
        Path("runs.toml").write_bytes((BOM if bom else b"") + text.encode())
        argv = ["validate", "--published", "runs.toml", "--json"]
        check_published(argv, *run(argv, time_limit))

    OUTCOMES.clear()
    row_cases()
    assert OUTCOMES["validate", 0] >= cases // 8 and OUTCOMES["validate", 2] >= cases // 8, OUTCOMES
