"""Damaged traces, one reproducer each (issue 15): a counted skip or a one-line error, never a traceback."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_kineto_builders import CPU_PID, MAIN_TID, TraceBuilder

from profiler.kineto.source import GUARD_AFTER_BYTES, Source
from sim.cli.main import main


def _good(rank: int = 0, world: int = 1) -> TraceBuilder:
    b = TraceBuilder(rank, world)
    for i, n in enumerate((1, 2, 3)):
        b.step(n, 1000 * i, 900)
        b.launched_kernel("gemm", 1000 * i + 10, 1000 * i + 20, 100)
    return b


def _x(**over: Any) -> dict[str, Any]:
    ev = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": CPU_PID, "tid": MAIN_TID,
          "ts": 4.0e12 + 50, "dur": 5.0, "args": {}}
    ev.update(over)
    return {k: v for k, v in ev.items() if v is not _DROP}


_DROP = object()


@pytest.fixture
def capsys(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Any:
    """capsys whose err also holds the log records, formatted as the CLI prints them."""
    caplog.set_level(logging.WARNING)

    class Both:
        def readouterr(self) -> Any:
            out = capsys.readouterr()
            logs = "".join(f"{r.levelname} {r.name}: {r.getMessage()}\n" for r in caplog.records)
            caplog.clear()
            return type(out)(out.out, logs + out.err)

    return Both()


def _run(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["analyze", "--json", str(path), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _write(tmp_path: Path, extra: list[Any], header: dict[str, Any] | None = None) -> Path:
    b = _good()
    doc = b.doc()
    doc["traceEvents"][3:3] = extra
    doc.update(header or {})
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    (d / "rank0.json").write_text(json.dumps(doc))
    return d


SKIPS = [
    ("entry_not_object", [1, "x", None, [1, 2]], 4),
    ("args_not_object", [_x(args=[1]), _x(args="a")], 2),
    ("name_not_string", [_x(name=["a"]), _x(name={"a": 1})], 2),
    ("cat_not_string", [_x(cat=["cpu_op"])], 1),
    ("dur_missing", [_x(dur=_DROP), _x(dur=None)], 2),
    ("dur_not_number", [_x(dur="long"), _x(dur=[1])], 2),
    ("dur_negative", [_x(dur=-3.0)], 1),
    ("dur_out_of_range", [_x(dur=1e300)], 1),
    ("ts_not_number", [_x(ts="soon"), _x(ts=_DROP), _x(ts={"a": 1})], 3),
    ("ts_out_of_range", [_x(ts=1e300)], 1),
    ("id_invalid", [_x(pid=[1]), _x(tid=10**30)], 2),
    ("correlation_invalid", [_x(cat="cuda_runtime", args={"correlation": "x"})], 1),
    ("number_too_large", [_x(cat="user_annotation", name="ProfilerStep#" + "9" * 40, dur=900)], 1),
]


@pytest.mark.parametrize(("kind", "events", "count"), SKIPS, ids=[s[0] for s in SKIPS])
def test_malformed_event_is_a_counted_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           kind: str, events: list[Any], count: int) -> None:
    code, out, err = _run(capsys, _write(tmp_path, events))
    assert code == 0, err
    summary = json.loads(out)
    assert summary["malformed_events"] == {kind: count}
    assert summary["step_time_s"] == pytest.approx(900e-6)
    lines = [ln for ln in err.splitlines() if "skipped" in ln]
    assert len(lines) == 1 and lines[0].startswith("WARNING") and "rank0.json" in lines[0]
    assert "Traceback" not in err


def test_first_event_index_and_value_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, _write(tmp_path, [_x(), _x(dur=-7.5), _x(dur=-1.0)]))
    assert code == 0
    assert "skipped 2 event(s) with negative dur (first: event #4, value -7.5)" in err


def test_negative_and_zero_profiler_steps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = _good()
    b.step(4, 3000, -243_400)  # the step_time_s = -0.2434
    b.step(5, 3500, 0)
    d = tmp_path / "run"
    d.mkdir()
    b.write(d / "rank0.json")
    code, out, err = _run(capsys, d)
    assert code == 0, err
    s = json.loads(out)
    assert s["step_time_s"] > 0
    assert s["malformed_events"] == {"dur_negative": 1, "step_not_positive": 1}


def test_no_malformed_key_on_a_clean_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, _write(tmp_path, []))
    assert code == 0 and "malformed_events" not in json.loads(out) and "WARNING" not in err


HEADERS = [
    ({"distributedInfo": [1]}, "distributedInfo is [1]; expected an object"),
    ({"distributedInfo": {"rank": "0", "world_size": 1}}, "distributedInfo.rank is '0'"),
    ({"distributedInfo": {"rank": -1, "world_size": 1}}, "distributedInfo.rank is -1"),
    ({"distributedInfo": {"rank": 0, "world_size": 0}}, "distributedInfo.world_size is 0"),
    ({"distributedInfo": {"rank": 0, "world_size": 10**40}}, "distributedInfo.world_size is 1e+40"),
    ({"distributedInfo": {"rank": 0, "world_size": 2.5}}, "distributedInfo.world_size is 2.5"),
]


@pytest.mark.parametrize(("header", "message"), HEADERS)
def test_bad_distributed_info_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  header: dict[str, Any], message: str) -> None:
    code, out, err = _run(capsys, _write(tmp_path, [], header))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "rank0.json" in err


def test_warning_reaches_stderr_of_the_cli(tmp_path: Path) -> None:
    import subprocess
    import sys

    d = _write(tmp_path, [_x(dur=None), 7])
    res = subprocess.run([sys.executable, "-m", "sim.cli.main", "analyze", "--json", str(d)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "skipped" in ln]
    assert len(lines) == 2 and all(ln.startswith("WARNING ") for ln in lines)
    assert json.loads(res.stdout)["malformed_events"] == {"entry_not_object": 1, "dur_missing": 1}


def _gz_run(tmp_path: Path, data: bytes) -> Path:
    d = tmp_path / "gz"
    d.mkdir(exist_ok=True)
    (d / "rank0.json.gz").write_bytes(data)
    return d


def _trace_bytes() -> bytes:
    return orjson.dumps(_good().doc())


def test_gzip_with_appended_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, _gz_run(tmp_path, gzip.compress(_trace_bytes()) + b"garbage!"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "rank0.json.gz: 8 byte(s) of data that is not gzip after the end of the gzip stream" in err


def test_gzip_concatenated_members_are_one_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _trace_bytes()
    code, out, err = _run(capsys, _gz_run(tmp_path, gzip.compress(data[:1000]) + gzip.compress(data[1000:])))
    assert code == 0, err
    assert json.loads(out)["step_time_s"] == pytest.approx(900e-6)


@pytest.mark.parametrize("cut", [1, 11, 30, -9, -1])
def test_gzip_truncated(tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int) -> None:
    data = gzip.compress(_trace_bytes())
    code, _, err = _run(capsys, _gz_run(tmp_path, data[:cut]))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "rank0.json.gz" in err, err
    assert "Traceback" not in err


def test_gzip_corrupt_middle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(gzip.compress(_trace_bytes()))
    data[40:60] = b"\xff" * 20
    code, _, err = _run(capsys, _gz_run(tmp_path, bytes(data)))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "rank0.json.gz" in err, err


def test_gzip_bomb_stops_early(tmp_path: Path) -> None:
    """1 GiB of whitespace in a ~1 MB gzip: refused after about 64 MiB of output."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (16 << 20)
    parts = [comp.compress(b'{"traceEvents": [')]
    parts += [comp.compress(chunk) for _ in range(64)]
    parts.append(comp.compress(b"]}") + comp.flush())
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(b"".join(parts))
    src = Source(path)
    with pytest.raises(ValueError, match=r"rank0.json.gz: gzip data expands more than 200x") as exc:
        for _ in src:
            pass
    assert "\n" not in str(exc.value)
    assert src.out_bytes <= GUARD_AFTER_BYTES + (2 << 20)
