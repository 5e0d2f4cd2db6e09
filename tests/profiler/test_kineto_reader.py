"""The streaming reader returns exactly what orjson.loads of the whole file returns."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.kineto.columns import CATEGORIES
from profiler.kineto.parse_file import read_columns
from profiler.kineto.reader import NotATraceError, TraceStream

TRICKY_NAMES = ["a}, {b", 'q"}, {"x', "}]", "[", "{lambda()#1}, {lambda()#2}", "é ünïcode ✓"]


def _events(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append({"ph": "X", "cat": CATEGORIES[i % len(CATEGORIES)], "name": TRICKY_NAMES[i % len(TRICKY_NAMES)],
                    "pid": i % 3, "tid": 7, "ts": 1000.5 + i, "dur": 2,
                    "args": {"correlation": i, "nested": [{"a": [1, {"b": "}, {"}]}, {}], "bytes": i}})
    out.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 5})
    return out


def _stream(path: Path, batch_bytes: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    s = TraceStream(path, batch_bytes)
    events = [e for batch in s.batches() for e in batch]
    return events, s.header


LAYOUTS = {
    "kineto": lambda evs: {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": evs,
                           "traceName": "x", "baseTimeNanoseconds": 17},
    "events_first": lambda evs: {"traceEvents": evs, "INFO": ["a]", "b"],
                                 "deviceProperties": [{"id": 0}, {"id": 1}]},
    "empty": lambda evs: {"schemaVersion": 1, "traceEvents": []},
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dump", ["orjson", "orjson_indent", "json_spaced"])
@pytest.mark.parametrize("batch_bytes", [1, 300, 1 << 20])
def test_stream_equals_whole_file_parse(tmp_path: Path, layout: str, dump: str, batch_bytes: int) -> None:
    doc = LAYOUTS[layout](_events(60))
    data = {"orjson": lambda d: orjson.dumps(d), "orjson_indent": lambda d: orjson.dumps(d, option=orjson.OPT_INDENT_2),
            "json_spaced": lambda d: json.dumps(d, indent=None, separators=(" , ", " : ")).encode()}[dump](doc)
    path = tmp_path / "t.json"
    path.write_bytes(data)
    events, header = _stream(path, batch_bytes)
    expected = orjson.loads(data)
    assert events == expected.pop("traceEvents")
    assert header == expected


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="{}[],\" :\\ab", max_size=12), min_size=1, max_size=30),
       st.integers(min_value=1, max_value=400))
def test_stream_survives_adversarial_names(tmp_path_factory: pytest.TempPathFactory, names: list[str], batch: int) -> None:
    events = [{"ph": "X", "name": n, "args": {"s": n, "l": [{"k": n}]}} for n in names]
    path = tmp_path_factory.mktemp("adv") / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events, "tail": names}))
    got, header = _stream(path, batch)
    assert got == events and header == {"tail": names}


def test_gzip_is_sniffed_not_trusted_from_the_name(tmp_path: Path) -> None:
    doc = LAYOUTS["kineto"](_events(10))
    (tmp_path / "plain.json.gz").write_bytes(orjson.dumps(doc))       # not compressed
    (tmp_path / "zipped.json").write_bytes(gzip.compress(orjson.dumps(doc)))  # compressed
    (tmp_path / "two_members.json").write_bytes(
        gzip.compress(orjson.dumps(doc)[:50]) + gzip.compress(orjson.dumps(doc)[50:]))
    for name in ("plain.json.gz", "zipped.json", "two_members.json"):
        events, _ = _stream(tmp_path / name, 200)
        assert events == doc["traceEvents"]


def test_not_a_trace(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_bytes(b'{"process_groups": []}')
    with pytest.raises(NotATraceError):
        _stream(tmp_path / "m.json", 100)


def test_columns_keep_only_used_categories(tmp_path: Path) -> None:
    evs = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2.5, "args": {"correlation": 5}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "nccl:all_reduce", "pid": 0, "tid": 7, "ts": 9, "dur": 9},
        {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 99},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "pid": 0, "tid": 9, "ts": 3, "dur": 1, "args": {"bytes": 64}},
        {"ph": "X", "cat": "user_annotation", "name": "nccl:send", "pid": "host", "tid": 1, "ts": 3, "dur": 1,
         "args": {"Input Dims": [[4]]}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "pt_gloo_runloop"}},
        {"ph": "s", "cat": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 1},
    ]
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": evs}))
    tc = read_columns(path)
    assert [tc.names[c] for c in tc.name] == ["k", "Memcpy DtoH", "nccl:send"]
    assert list(tc.dur) == [2.5, 1.0, 1.0] and list(tc.corr) == [5, -1, -1]
    assert list(tc.nbytes_moved) == [0, 64, 0]
    assert tc.pid[2] < 0  # the string pid got a negative code
    assert tc.skipped == {"gpu_user_annotation": 1, "python_function": 1, "Trace": 1}
    assert tc.args == {2: {"Input Dims": [[4]]}}
    assert tc.thread_names == {(1, 2): "pt_gloo_runloop"}


def test_odd_numbers_are_coerced_or_skipped(tmp_path: Path) -> None:
    ok = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7.0, "ts": "12.5", "dur": 2,
           "args": {"correlation": 3.0}}]
    (tmp_path / "a.json").write_bytes(orjson.dumps({"traceEvents": ok}))
    tc = read_columns(tmp_path / "a.json")
    assert (tc.ts[0], tc.dur[0], tc.corr[0], tc.tid[0]) == (12.5, 2.0, 3, 7)
    bad = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1},
           {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": None}]
    (tmp_path / "b.json").write_bytes(orjson.dumps({"traceEvents": bad}))
    tc = read_columns(tmp_path / "b.json")  # skipped and counted (malformed.py), not an error
    assert len(tc) == 0
    assert {k.key: c.count for k, c in tc.malformed.items()} == {"ts_not_number": 1, "dur_missing": 1}


def test_parsing_restores_the_garbage_collector(tmp_path: Path) -> None:
    import gc

    (tmp_path / "t.json").write_bytes(orjson.dumps({"traceEvents": _events(5)}))
    assert gc.isenabled()
    read_columns(tmp_path / "t.json")
    assert gc.isenabled()
    (tmp_path / "bad.json").write_bytes(b'{"traceEvents": [{')
    with pytest.raises(ValueError):
        read_columns(tmp_path / "bad.json")
    assert gc.isenabled()
