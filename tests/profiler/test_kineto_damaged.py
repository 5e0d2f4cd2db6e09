"""Damaged traces, one reproducer each (issue 15): a counted skip or a one-line error, never a traceback."""

from __future__ import annotations

import gzip
import json
import logging
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from test_kineto_builders import CPU_PID, MAIN_TID, TraceBuilder

from profiler.kineto.parse_file import read_columns
from profiler.kineto.reader import TraceReader
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


@pytest.mark.slow  # a CLI subprocess
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


@pytest.mark.slow
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
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="expands more than 200x"):
            read_columns(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def _where(data: bytes, off: int) -> str:
    """Ground truth: "byte B (line L, column C)" of a file offset."""
    line, last = data[:off].count(NL) + 1, data.rfind(NL, 0, off)
    return f"byte {off} (line {line}, column {off - last})"


NL = b"\n"


def _big_doc(n: int = 20000) -> bytes:
    b = _good()
    for i in range(n):
        b.op(f"aten::op{i % 50}", 100 + i * 0.01, 0.005)
    return orjson.dumps(b.doc(), option=orjson.OPT_INDENT_2)


@pytest.mark.parametrize("block", [1 << 20, 4096, pytest.param(97, marks=pytest.mark.slow)])
def test_nan_reproducer_gives_the_exact_position(tmp_path: Path, block: int) -> None:
    data = _big_doc()
    i = data.index(b'"dur": 0.005', len(data) // 2)
    data = data[:i] + b'"dur": NaN' + data[i + len(b'"dur": 0.005'):]
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    reader = TraceReader(path, block_bytes=block)
    with pytest.raises(ValueError) as exc:
        for piece in reader.pieces():
            reader.parse(piece)
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"at {_where(data, i + 7)}" in msg and "found 'NaN," in msg, msg


@pytest.mark.slow
def test_every_byte_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pass: orjson sees each byte of the file once (plus the few bytes around each piece)."""
    import profiler.kineto.reader as reader_mod

    data = _big_doc(60000)
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    seen = [0]
    real = orjson.loads

    def counting(text: Any) -> Any:
        seen[0] += len(text)
        return real(text)

    monkeypatch.setattr(reader_mod.orjson, "loads", counting)
    reader = TraceReader(path, batch_bytes=64 << 10, block_bytes=16 << 10)
    pieces = 0
    for piece in reader.pieces():
        reader.parse(piece)
        pieces += 1
    assert pieces > 20
    assert len(data) <= seen[0] <= len(data) + 8 * pieces


DAMAGE = [
    ("missing comma", b'{"ph": "X"} {"ph": "X"}', b'{"ph": "X"}', "expected ',' or ']'"),
    ("trailing comma", b'{"ph": "X"}, ]', b', ]', "trailing comma"),
    ("comma after comma", b' , {"ph": "X"}]', b', {', "expected a JSON value"),
    ("wrong closer", b'{"ph": "X"}}', b'}', "expected ',' or ']'"),
    ("double comma", b'{"ph": "X"},, {"ph": "X"}]', b', {', ""),
    ("infinity", b'{"ph": "X", "dur": Infinity}]', b"Infinity", "unexpected character"),
]


@pytest.mark.parametrize(("label", "events", "token", "message"), DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_array_is_a_positioned_error(tmp_path: Path, label: str, events: bytes, token: bytes,
                                            message: str) -> None:
    pad = b'{"ph": "i", "name": "x", "ts": 1},\n' * 200
    data = b'{"schemaVersion": 1,\n "traceEvents": [\n' + pad + events + b'\n], "x": 1}'
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    with pytest.raises(ValueError) as exc:
        read_columns(path, batch_bytes=256)
    msg = str(exc.value)
    off = data.index(token, len(pad))
    if label == "missing comma":
        off = data.index(b"} {") + 2
    elif label == "double comma":
        off = data.index(b",,") + 1
    elif label == "wrong closer":
        off = data.index(b"}}") + 1
    assert _where(data, off) in msg and message in msg and "\n" not in msg, msg


@pytest.mark.parametrize("tail", [b"]", b"] }garbage", b'], "a": }', b"]]", b""])
def test_bad_tail_is_an_error(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "i"}' + tail)
    with pytest.raises(ValueError, match="rank0.json: not a valid Kineto trace") as exc:
        read_columns(path)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("batch", [1, 1 << 20])
def test_leading_comma_in_the_array(tmp_path: Path, batch: int) -> None:
    data = b'{"traceEvents": [ , {"ph": "i"}, {"ph": "i"}]}'
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    with pytest.raises(ValueError) as exc:
        read_columns(path, batch_bytes=batch)
    assert _where(data, data.index(b",")) in str(exc.value), str(exc.value)


def test_event_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "i"}, {"ph": "i", "name": "' + b"x" * (3 << 20) + b'"}]}')
    reader = TraceReader(path, block_bytes=1 << 16, limit_bytes=1 << 20)
    with pytest.raises(ValueError, match=r"traceEvents entry at byte 29 \(line 1, column 30\) is over 1 MiB"):
        for _ in reader.pieces():
            pass


@pytest.mark.slow
def test_whitespace_between_events_costs_no_memory(tmp_path: Path) -> None:
    """64 MiB of whitespace (with newlines) between two events: bounded memory, right positions."""
    import tracemalloc

    ws = (b" " * 1023 + b"\n") * (64 << 10)
    data = b'{"traceEvents": [{"ph": "i"},' + ws + b'{"ph": "X", "dur": NaN}]}'
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as exc:
            read_columns(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, peak
    assert _where(data, data.index(b"NaN")) in str(exc.value)
    ok = tmp_path / "ok.json"
    ok.write_bytes(data.replace(b"NaN", b"1"))
    assert len(read_columns(ok)) == 0


def test_whitespace_holes_keep_positions_with_small_blocks(tmp_path: Path) -> None:
    ws = b"\n" + b" " * 300 + b"\n\n" + b" " * 500
    data = b'{"traceEvents": [' + ws + b'{"ph": "i"},' + ws + b'{"ph": "i"},' + ws + b"tru]}"
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    for block in (64, 100, 1 << 20):
        reader = TraceReader(path, block_bytes=block)
        with pytest.raises(ValueError) as exc:
            for piece in reader.pieces():
                reader.parse(piece)
        assert _where(data, data.index(b"tru")) in str(exc.value), (block, str(exc.value))


def _quadratic_match(tc: Any, calls: dict[str, np.ndarray], work_rows: np.ndarray) -> np.ndarray:
    """The previous matcher (quadratic), the ground truth of the linear one."""
    from profiler.kineto.collectives import elements
    from profiler.kineto.cpu import _call_elements, _compatible
    from profiler.kineto.names import call_kind

    order = np.argsort(calls["start_us"], kind="stable")
    taken = np.zeros(order.size, dtype=bool)
    out = np.full(work_rows.size, -1, dtype=np.int64)
    elems = {int(k): _call_elements(tc, int(calls["row"][k])) for k in order}
    for w in np.argsort(tc.ts[work_rows], kind="stable"):
        row = int(work_rows[w])
        wkind = call_kind(tc.name_of(row)) or "other"
        dims = tc.args.get(row, {}).get("Input Dims")
        welem = elements(dims[0]) if isinstance(dims, list) and dims else -1
        for k in order:
            if calls["start_us"][k] > tc.ts[row]:
                break
            if taken[k] or not _compatible(str(calls["kind"][k]), wkind):
                continue
            if welem >= 0 and elems[int(k)] and welem not in elems[int(k)]:
                continue
            taken[k], out[w] = True, k
            break
    return out


@pytest.mark.parametrize("seed", range(30))
def test_linear_gloo_matching_equals_the_quadratic_one(seed: int) -> None:
    from types import SimpleNamespace

    from profiler.kineto.cpu import match_work

    rng = np.random.default_rng(seed)
    n_calls, n_work = int(rng.integers(0, 60)), int(rng.integers(0, 60))
    kinds = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]
    names = [f"gloo:{k}" for k in kinds]
    rows = n_calls + n_work
    ts = np.round(rng.uniform(0, 100, rows), 0)  # ties on purpose
    name_of = [""] * rows
    args: dict[int, dict[str, Any]] = {}
    call_kinds = []
    for i in range(n_calls):
        call_kinds.append(kinds[int(rng.integers(0, 4))])
        if rng.random() < 0.7:
            args[i] = {"Input Dims": [[int(rng.integers(1, 4))] for _ in range(int(rng.integers(1, 3)))]}
    for j in range(n_work):
        r = n_calls + j
        name_of[r] = names[int(rng.integers(0, 4))]
        if rng.random() < 0.7:
            args[r] = {"Input Dims": [[int(rng.integers(1, 4))]]}
    tc = SimpleNamespace(ts=ts, args=args, name_of=lambda r: name_of[r])
    calls = {"start_us": ts[:n_calls].copy(), "kind": np.array(call_kinds, dtype=object),
             "row": np.arange(n_calls)}
    work = np.arange(n_calls, rows)
    np.testing.assert_array_equal(match_work(tc, calls, work), _quadratic_match(tc, calls, work))  # type: ignore[arg-type]


def test_gloo_matching_is_linear() -> None:
    """20,000 calls and transfers of one kind: well under a second (the old matcher: minutes)."""
    import time
    from types import SimpleNamespace

    from profiler.kineto.cpu import match_work

    n = 20000
    ts = np.arange(2 * n, dtype=np.float64)
    tc = SimpleNamespace(ts=ts, args={}, name_of=lambda r: "gloo:all_reduce")
    calls = {"start_us": ts[:n] * 0.5, "kind": np.full(n, "all_reduce", dtype=object), "row": np.arange(n)}
    t0 = time.process_time()
    out = match_work(tc, calls, np.arange(n, 2 * n))  # type: ignore[arg-type]
    assert (out == np.arange(n)).all()
    assert time.process_time() - t0 < 5.0


@pytest.mark.parametrize("doc", [b'{"traceEvents": [], "traceEvents": [{"ph": "i"}]}',
                                 b'{"traceEvents": 1, "traceEvents": [{"ph": "i"}]}'])
def test_two_trace_event_keys_are_an_error(tmp_path: Path, doc: bytes) -> None:
    (tmp_path / "rank0.json").write_bytes(doc)
    with pytest.raises(ValueError, match="rank0.json: not a valid Kineto trace: traceEvents appears twice"):
        read_columns(tmp_path / "rank0.json")
