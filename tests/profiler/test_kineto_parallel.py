"""Parsing with worker processes gives exactly what parsing in this process gives."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from test_kineto_cpu import gloo_rank

from profiler.kineto import load_run
from profiler.kineto.parse_file import read_columns


@pytest.fixture(scope="module")
def pool():  # type: ignore[no-untyped-def]
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("forkserver")) as p:
        yield p


def _same_columns(a, b) -> None:  # type: ignore[no-untyped-def]
    for k in ("cat", "pid", "tid", "ts", "dur", "corr", "nbytes_moved"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert [a.names[c] for c in a.name] == [b.names[c] for c in b.name]
    assert (a.header, a.args, a.thread_names, a.skipped) == (b.header, b.args, b.thread_names, b.skipped)


def test_pooled_batches_equal_serial_even_with_bad_cuts(tmp_path: Path, pool) -> None:  # type: ignore[no-untyped-def]
    # names holding "}, {" make candidate cuts inside strings; string pids need remapping
    names = ["a}, {b", "plain", 'x"}, {"ph": "X"', "{lambda()#1}, {lambda()#2}"]
    events = [{"ph": "X", "cat": "cpu_op", "name": names[i % 4], "pid": ["host", 7][i % 2],
               "tid": i % 3, "ts": float(i), "dur": 1.0, "args": {"correlation": i}} for i in range(400)]
    events += [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "w"}},
               {"ph": "X", "cat": "python_function", "name": "f", "pid": 7, "tid": 1, "ts": 0, "dur": 1}]
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "t"},
                                  option=orjson.OPT_INDENT_2))
    serial = read_columns(path)
    for batch in (1, 97, 1000, 1 << 20):
        _same_columns(serial, read_columns(path, batch_bytes=batch, pool=pool, inflight=3))
    assert len(serial) == 400 and serial.header == {"schemaVersion": 1, "traceName": "t"}


def test_pooled_errors_are_one_line(tmp_path: Path, pool) -> None:  # type: ignore[no-untyped-def]
    data = orjson.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "n", "ts": i} for i in range(300)]})
    (tmp_path / "t.json").write_bytes(data[:-700])
    with pytest.raises(ValueError, match="t.json: not a valid Kineto trace: truncated or corrupt JSON"):
        read_columns(tmp_path / "t.json", batch_bytes=200, pool=pool)


def test_load_run_with_workers_equals_serial(tmp_path: Path) -> None:
    for r in range(2):
        gloo_rank(r).write(tmp_path / f"rank{r}.json")
    serial = load_run(tmp_path, workers=1)
    parallel = load_run(tmp_path, workers=2)
    pd.testing.assert_frame_equal(serial.timeline.spans, parallel.timeline.spans)
    pd.testing.assert_frame_equal(serial.raw, parallel.raw)
    pd.testing.assert_frame_equal(serial.steps, parallel.steps)
    assert serial.timeline.meta == parallel.timeline.meta


def test_pooled_leading_comma_is_an_error(tmp_path: Path, pool) -> None:  # type: ignore[no-untyped-def]
    events = b", ".join(b'{"ph": "X", "cat": "cpu_op", "name": "n", "ts": 1, "dur": 1}' for _ in range(50))
    (tmp_path / "t.json").write_bytes(b'{"traceEvents": [ , ' + events + b"]}")
    with pytest.raises(ValueError, match=r"t.json: not a valid Kineto trace: .* at byte 18 \(line 1, column 19\)"):
        read_columns(tmp_path / "t.json", batch_bytes=200, pool=pool)
