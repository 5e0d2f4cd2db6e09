"""Issue 28's input reproducers on the command line: each ends in one line and exit 2, or works.

(Published rows: tests/profiler/test_published_output.py; zero-duration ranks:
tests/profiler/test_trace_fuzz.py.)
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.cli.main import main


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``argv`` exits 2 with exactly one line on stderr, no traceback."""
    code, _, err = run(capsys, *argv)
    assert code == 2, (argv, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _char_device(path: Path) -> Path:
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # a private node like /dev/null
    except PermissionError:
        pytest.skip("creating a device node needs root")
    return path


def _socket(path: Path) -> Iterator[Path]:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        yield path


@pytest.mark.parametrize(("make", "kind"), [(_fifo, "a FIFO (named pipe)"), (_char_device, "a character device"),
                                            (Path.mkdir, "a directory")])
@pytest.mark.parametrize("flag", ["--config", "--cluster", "--profile"])
def test_special_files_are_refused_before_reading(capsys: pytest.CaptureFixture[str], in_tmp: Path, make, kind: str,
                                                  flag: str, time_limit) -> None:
    """A FIFO at --config hung forever (open waits for a writer); now nothing is read."""
    path = in_tmp / "job.toml"
    make(path)
    with time_limit(20):
        err = one_line_error(capsys, "simulate", "--model", "tiny", flag, "job.toml", "--no-report")
    assert f"job.toml: it is {kind}, not a regular file" in err


def test_a_socket_is_refused(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    for path in _socket(in_tmp / "job.toml"):
        assert "it is a socket" in one_line_error(capsys, "simulate", "--config", str(path), "--no-report")


def test_a_utf8_bom_is_accepted(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    """Was: "not valid TOML: Invalid statement (at line 1, column 1)" with no hint."""
    (in_tmp / "job.toml").write_bytes(b'\xef\xbb\xbf[model]\nmodel = "tiny"\n[plan]\ntp = 2\n')
    code, out, err = run(capsys, "simulate", "--config", "job.toml", "--json", "--no-report")
    assert code == 0, err
    assert json.loads(out)["config"]["plan"]["tp"] == 2


def test_a_trace_path_that_is_a_fifo_is_refused(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    _fifo(in_tmp / "rank0.json")
    err = one_line_error(capsys, "analyze", "rank0.json")
    assert "it is a FIFO (named pipe), not a trace file or a run directory" in err


def test_nodes_resize_a_cluster_file_as_they_resize_a_preset(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    """Was: ``--cluster my.toml --nodes 4 --dp 32`` failed with "(1 nodes x 8 = 8)", the flag silently dropped."""
    (in_tmp / "my.toml").write_text('base = "dgx-h100"\nnodes = 1\n')
    code, out, err = run(capsys, "simulate", "--model", "tiny", "--cluster", "my.toml", "--nodes", "4", "--dp", "32",
                         "--tp", "1", "--pp", "1", "--json", "--no-report")
    assert code == 0, err
    assert json.loads(out)["config"]["cluster"]["nodes"] == 4
    code, out, _ = run(capsys, "simulate", "--model", "tiny", "--cluster", "my.toml", "--nodes", "2", "--gpus-per-node", "4",
                       "--price", "7", "--json", "--no-report")
    cluster = json.loads(out)["config"]["cluster"]
    assert code == 0 and (cluster["nodes"], cluster["gpus_per_node"], cluster["price_per_gpu_hour_usd"]) == (2, 4, 7.0)


@pytest.mark.parametrize(("line", "needle"), [
    (f"nodes = {10**29}", "nodes=100000000000000000000000000000 is invalid: expected an integer in [1, 1000000]"),
    ("gpus_per_node = 100000", "gpus_per_node=100000 is invalid: expected an integer in [1, 1024]"),
    ("price_per_gpu_hour_usd = inf", "price_per_gpu_hour_usd=inf is invalid"),
    ("oversubscription = nan", "oversubscription=nan is invalid"),
])
def test_cluster_file_values_are_bounded_like_flags(capsys: pytest.CaptureFixture[str], in_tmp: Path, line: str,
                                                    needle: str) -> None:
    (in_tmp / "c.toml").write_text(f'base = "dgx-h100"\n{line}\n')
    assert needle in one_line_error(capsys, "simulate", "--model", "tiny", "--cluster", "c.toml", "--no-report")


@pytest.mark.parametrize("price", ["dgx-h100=1e400", "dgx-h100=inf", "dgx-h100=nan", "dgx-h100=-1",
                                   "dgx-h100=1e400/node-hour"])
def test_explore_prices_must_be_finite_and_not_negative(capsys: pytest.CaptureFixture[str], price: str) -> None:
    """Was: 1e400 accepted as infinity, then an internal error (OverflowError) or every cost null, exit 0."""
    err = one_line_error(capsys, "explore", "--model", "tiny", "--cluster", "dgx-h100", "--gpus", "8", "--price", price,
                         "--out", "sweep", "--no-report", "--workers", "1")
    assert f"price='{price}' is invalid: expected a number in [0, 1e+06] USD per GPU-hour" in err
    assert not Path("sweep").exists()


def test_schedule_checks_every_schedule_before_simulating_any(capsys: pytest.CaptureFixture[str]) -> None:
    """Was: 1f1b simulated first (23 s at scale, with a 'large run' notice), then dualpipev's error."""
    t0 = time.process_time()
    err = one_line_error(capsys, "schedule", "--schedule", "1f1b,dualpipev", "--pp", "64", "--microbatches", "100",
                         "--no-report")
    assert "dualpipev needs at least 2*pp = 128 micro-batches" in err and time.process_time() - t0 < 5


def test_compare_checks_every_schedule_before_simulating_any(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.cli.cmd_compare as cmd_compare

    def no_simulation(job: object) -> None:
        raise AssertionError("simulated before every schedule was checked")

    monkeypatch.setattr(cmd_compare, "simulate", no_simulation)
    err = one_line_error(capsys, "compare", "--model", "llama3-8b", "--tp", "4", "--pp", "2", "--nodes", "1",
                         "--microbatches", "2", "--schedules", "1f1b,dualpipev", "--no-report")
    assert "dualpipev needs at least 2*pp = 4 micro-batches" in err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


@pytest.mark.parametrize("flag", ["--ray", "--dask"])
def test_an_unreachable_cluster_is_one_line_before_any_work(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """Was (--ray): a hang; now both flags probe the address first and write nothing."""
    scheme = "ray" if flag == "--ray" else "tcp"
    address = f"{scheme}://127.0.0.1:{_closed_port()}"
    err = one_line_error(capsys, "explore", "--model", "tiny", "--cluster", "dgx-h100", "--gpus", "8", flag, address,
                         "--out", "sweep", "--no-report")
    assert f"{flag[2:]}='{address}' is invalid: cannot connect to 127.0.0.1:" in err
    assert not Path("sweep").exists()


def test_a_silent_cluster_times_out_after_30_s(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that drops the connection attempt: the probe gives up after Dask's 30 s, in one line."""
    import sim.explore.backends as backends

    waited: list[float] = []

    def silent(endpoint: tuple[str, int], timeout: float) -> socket.socket:
        waited.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(backends.socket, "create_connection", silent)
    err = one_line_error(capsys, "explore", "--model", "tiny", "--cluster", "dgx-h100", "--gpus", "8", "--ray",
                         "ray://head.example:10001", "--out", "sweep", "--no-report")
    assert waited == [30.0] and "no answer from head.example:10001 within 30 s" in err


@pytest.mark.parametrize(("address", "endpoint"), [
    ("tcp://10.0.0.5:8786", ("10.0.0.5", 8786)), ("tcp://h", ("h", 8786)), ("ray://h", ("h", 10001)),
    ("h:6379", ("h", 6379)), ("[::1]:7", ("::1", 7)), ("auto", None), ("local", None), ("inproc://x", None),
    ("tcp://h:99999", None)])
def test_cluster_endpoints(address: str, endpoint: tuple[str, int] | None) -> None:
    from sim.explore.backends import cluster_endpoint

    assert cluster_endpoint(address) == endpoint


def test_presets_list_every_model_that_model_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    """Was: the 7 MoE presets --model accepts were missing; and every cluster's price shows its basis."""
    from schedules.model_presets import model_presets
    from schedules.moe_presets import moe_presets

    code, out, _ = run(capsys, "presets", "--json")
    doc = json.loads(out)
    listed = [m["model"] for m in doc["models"]]
    assert code == 0 and set(listed) == {*model_presets(), *moe_presets()} and len(moe_presets()) >= 7
    mixtral = next(m for m in doc["models"] if m["model"] == "mixtral-8x7b")
    assert mixtral["experts"] == "2 of 8" and 12 < mixtral["active_params_b"] < 14 < mixtral["params_b"]
    assert {p["cluster"] for p in doc["prices"]} == {c["cluster"] for c in doc["clusters"]}
    assert all(p["basis"] and p["source"] and p["as_of"] for p in doc["prices"])


@pytest.mark.parametrize(("flag", "module"), [("--ray", "ray"), ("--dask", "distributed")])
def test_a_missing_backend_package_is_one_line_before_any_work(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch, flag: str,
                                                               module: str) -> None:
    """Was: a reachable address without the package planned the whole sweep (35 s for 2 designs) and only
    then said the package was missing; now the backend checks it when made, before the sweep starts."""
    import sim.cli.cmd_explore as cmd_explore
    import sim.explore.backends as backends

    monkeypatch.setitem(sys.modules, module, None)  # importing it raises ImportError
    monkeypatch.setattr(backends, "check_reachable", lambda flag, address: None)  # a cluster that answers
    monkeypatch.setattr(cmd_explore, "run_sweep", lambda *a, **k: pytest.fail("the sweep started"))
    err = one_line_error(capsys, "explore", "--model", "tiny", "--cluster", "dgx-h100", "--gpus", "8", flag,
                         "tcp://10.0.0.5:8786", "--out", "sweep", "--no-report")
    assert f"{flag} needs the optional '{module}' package" in err
    assert not Path("sweep").exists()
