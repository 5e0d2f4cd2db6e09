"""Damaged traces through analyze, replay and validate: sane numbers or one line, never a traceback.

Each case takes a small valid two-rank gloo run (``test_kineto_cpu.gloo_rank``; every fourth
case an NCCL GPU run, ``test_kineto_gpu._rank_trace``) and damages
rank 0 in one seeded way, either its decoded JSON (a field set to a wrong type or an absurd
number, a field removed, an entry replaced by a scalar, the header's distributedInfo, every
``dur`` 0 or no events at all) or its
bytes (cut, bytes inserted, deleted or repeated, gzip truncated or with garbage appended).
analyze runs on every case, replay on every third, critical-path on every sixth.
Every command must exit 0 with finite numbers, a positive step time and fractions in [0, 1],
or exit 2 with one line (validate: exit 1 when a target is missed, with sane numbers); each
run has a time limit (SIGALRM) as a hang guard.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from test_kineto_cpu import gloo_rank
from test_kineto_gpu import _rank_trace as gpu_rank

from sim.cli.main import main

CASES = 300  # issue 28's campaign damaged 300 traces
TIME_LIMIT_S = 20
FIELDS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]
ARG_FIELDS = ["correlation", "Input Dims", "Input type", "bytes", "In msg nelems", "Process Group Ranks"]
VALUES: list[Any] = [None, [], {}, "x", "", -1, 0, -1e9, 10 ** 40, 1e308, -1e308, True, 2.5,
                     [[[[[[[[1]]]]]]]], [1, "a", None], {"a": [1]}, "ProfilerStep#" + "9" * 40,
                     "trainsim:step 99999999999999999999", "ProfilerStep#3", "gloo:all_reduce",
                     [[-5]], [[10 ** 18, 10 ** 18]], "1e999"]
INSERTS = [b",", b"]", b"}", b"{", b"NaN", b"Infinity", b'"', b"\\", b"\x00", b"\xff\xfe",
           b"  \n  ", b",,", b"[[[[", b"null", b"1e999"]
FRACTIONS = ("bubble_fraction", "exposed_comm_fraction", "comm_overlap_fraction")


def _whole_rank(doc: dict[str, Any], rng: random.Random) -> str:
    """Damage to every event of the rank: every ``dur`` 0 (ProfilerStep kept or not), or no events."""
    what = rng.choice(["all dur 0", "ops dur 0", "no events", "only metadata"])
    events = doc["traceEvents"]
    if what == "no events":
        events.clear()
    elif what == "only metadata":
        events[:] = [ev for ev in events if ev.get("ph") == "M"]
    for ev in events:
        if "dur" in ev and (what == "all dur 0" or not str(ev.get("name", "")).startswith("ProfilerStep")):
            ev["dur"] = 0
    return what


def _semantic(doc: dict[str, Any], rng: random.Random) -> str:
    events = doc["traceEvents"]
    what = rng.random()
    if what < 0.05:
        return _whole_rank(doc, rng)
    if what < 0.1:
        info = doc.setdefault("distributedInfo", {})
        if not isinstance(info, dict):
            return "distributedInfo already damaged"
        key = rng.choice(["rank", "world_size", "pg_config", "backend"])
        info[key] = rng.choice(VALUES)
        if rng.random() < 0.2:
            doc["distributedInfo"] = rng.choice(VALUES)
        return f"distributedInfo.{key}"
    i = rng.randrange(len(events))
    if what < 0.2:
        events[i] = rng.choice([1, "x", None, [1, 2], 2.5, True])
        return f"entry {i} -> scalar"
    ev = events[i]
    if not isinstance(ev, dict):
        return f"entry {i} already damaged"
    if what < 0.75:
        key = rng.choice(FIELDS)
        if rng.random() < 0.25:
            ev.pop(key, None)
            return f"event {i} without {key}"
        ev[key] = rng.choice(VALUES)
        return f"event {i} {key}"
    args = ev.setdefault("args", {})
    if not isinstance(args, dict):
        return "no args"
    key = rng.choice(ARG_FIELDS)
    args[key] = rng.choice(VALUES)
    return f"event {i} args.{key}"


def _bytes_damage(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    what = rng.random()
    pos = rng.randrange(1, len(data))
    if what < 0.25:
        return data[:pos], f"cut at {pos}"
    if what < 0.6:
        ins = rng.choice(INSERTS)
        return data[:pos] + ins + data[pos:], f"insert {ins!r} at {pos}"
    if what < 0.8:
        n = rng.randint(1, 8)
        return data[:pos] + data[pos + n:], f"delete {n} at {pos}"
    n = rng.randint(1, 200)
    return data[:pos] + data[pos - n if pos > n else 0: pos] + data[pos:], f"repeat {n} at {pos}"


def _make_case(seed: int, root: Path) -> tuple[Path, str]:
    rng = random.Random(seed)
    d = root / f"case{seed}"
    d.mkdir()
    build = gpu_rank if seed % 4 == 3 else gloo_rank  # every 4th case: an NCCL GPU run
    build(1).write(d / "rank1.json")
    doc = build(0).doc()
    kind = rng.random()
    gz = rng.random() < 0.3
    if kind < 0.55:
        what = _semantic(doc, rng)
        if rng.random() < 0.3:
            what += "; " + _semantic(doc, rng)
        data = json.dumps(doc).encode()  # json: big ints and 1e308 survive
    else:
        data, what = _bytes_damage(json.dumps(doc).encode(), rng)
    if gz:
        data = gzip.compress(data)
        if rng.random() < 0.5:
            data, how = (data + b"garbage", "garbage after gzip") if rng.random() < 0.5 else (
                data[: rng.randrange(1, len(data))], "gzip cut")
            what += "; " + how
    (d / ("rank0.json" + (".gz" if gz else ""))).write_bytes(data)
    return d, what


def _numbers(obj: Any) -> Iterator[float]:
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield float(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)


Limit = Callable[[int], AbstractContextManager[None]]  # the suite's time_limit fixture (root conftest.py)


def _check(command: list[str], capsys: pytest.CaptureFixture[str], what: str, limit: Limit) -> int:
    capsys.readouterr()
    with limit(TIME_LIMIT_S):  # a hang fails the test (conftest.Hang), naming the limit
        code = main(command)
    out, err = capsys.readouterr()
    if code == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"trainsim {command[0]}: error: "), (what, err)
        return code
    assert code == 0 or (command[0] == "validate" and code == 1), (what, code, err)  # 1: a target missed
    assert "Traceback" not in err, (what, err)
    doc = json.loads(out)
    assert all(math.isfinite(x) for x in _numbers(doc)), (what, out)
    if command[0] == "analyze":
        assert doc["step_time_s"] is None or doc["step_time_s"] > 0, (what, doc["step_time_s"])
        for key in FRACTIONS:
            assert doc[key] is None or 0.0 <= doc[key] <= 1.0, (what, key, doc[key])
    return code


@pytest.mark.slow  # 75 cases a block; the damaged-trace cases of test_kineto_damaged stay in the quick subset
@pytest.mark.parametrize("block", range(4))
def test_damaged_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str], block: int, time_limit: Limit) -> None:
    codes: dict[int, int] = {}
    per_block = CASES // 4
    for seed in range(block * per_block, (block + 1) * per_block):
        d, what = _make_case(seed, tmp_path)
        code = _check(["analyze", "--json", str(d)], capsys, what, time_limit)
        codes[code] = codes.get(code, 0) + 1
        if seed % 3 == 0:
            _check(["replay", "--json", str(d)], capsys, what, time_limit)
        elif seed % 6 == 1:
            _check(["critical-path", "--json", str(d)], capsys, what, time_limit)
        shutil.rmtree(d)
    assert codes.get(0, 0) > 0 and codes.get(2, 0) > 0  # both outcomes occur: the damage is real


@pytest.mark.slow
def test_damaged_recording_through_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           time_limit: Limit) -> None:
    """validate on damaged copies of a committed recording (its manifest kept)."""
    src = Path(__file__).resolve().parents[2] / "traces" / "dp4-zero3"
    base = gzip.decompress((src / "rank0.json.gz").read_bytes())
    for seed in range(6):
        rng = random.Random(1000 + seed)
        d = tmp_path / f"v{seed}"
        shutil.copytree(src, d)
        data, what = _bytes_damage(base, rng) if seed % 2 else (base.replace(b'"dur": ', b'"dur": -', 3), "3 negative durs")
        (d / "rank0.json.gz").write_bytes(gzip.compress(data, compresslevel=1))
        _check(["validate", "--json", str(d)], capsys, what, time_limit)


@pytest.mark.parametrize("keep_steps", [False, True])
@pytest.mark.parametrize("command", ["analyze", "replay", "critical-path"])
def test_rank_whose_every_duration_is_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                           keep_steps: bool, time_limit: Limit) -> None:
    """Issue 28: a rank whose every ``dur`` is 0 was an IndexError (profiler/kineto/labels.py) in analyze,
    replay and critical-path. Every step zero: one line, exit 2 (no step to compare); only the ops zero
    (ProfilerStep kept): the run is read."""
    gloo_rank(1).write(tmp_path / "rank1.json")
    doc = gloo_rank(0).doc()
    for ev in doc["traceEvents"]:
        if "dur" in ev and not (keep_steps and str(ev.get("name", "")).startswith("ProfilerStep")):
            ev["dur"] = 0
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    argv = [command, str(tmp_path)] + (["--json"] if command != "critical-path" else [])
    capsys.readouterr()
    with time_limit(TIME_LIMIT_S):
        code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    if keep_steps:
        assert code == 0, err
    else:
        assert code == 2 and err.strip().count("\n") == 0 and "no profiler step" in err, err
