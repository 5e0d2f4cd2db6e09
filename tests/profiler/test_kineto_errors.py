"""Bad input: one-line ValueErrors or stated warnings, never a traceback from deep inside."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from test_kineto_builders import TraceBuilder

from profiler.kineto import load_run
from profiler.kineto.rank import rank_from_name


def _rank(rank: int | None, steps: tuple[int, ...] = (1, 2, 3), world: int | None = 2) -> TraceBuilder:
    b = TraceBuilder(rank, world)
    for i, n in enumerate(steps):
        b.step(n, 1000 * i, 1000)
        b.launched_kernel("gemm", 1000 * i + 10, 1000 * i + 20, 100)
    return b


def _one_line(exc: pytest.ExceptionInfo[ValueError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_truncated_plain_file(tmp_path: Path) -> None:
    data = orjson.dumps(_rank(0).doc())
    (tmp_path / "rank0.json").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError) as exc:
        load_run(tmp_path)
    assert "rank0.json" in _one_line(exc) and "truncated or corrupt" in _one_line(exc)


def test_truncated_gzip_file(tmp_path: Path) -> None:
    data = gzip.compress(orjson.dumps(_rank(0).doc()))
    (tmp_path / "rank0.json.gz").write_bytes(data[: len(data) - 20])
    with pytest.raises(ValueError, match=r"rank0.json.gz: truncated gzip"):
        load_run(tmp_path)


def test_corrupt_json_and_gzip(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_bytes(b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", ]}')
    with pytest.raises(ValueError, match="rank0.json: not a valid Kineto trace"):
        load_run(tmp_path)
    (tmp_path / "rank0.json").unlink()
    (tmp_path / "rank0.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage-garbage")
    with pytest.raises(ValueError, match="rank0.json.gz: corrupt gzip"):
        load_run(tmp_path)


def test_empty_and_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no trace files"):
        load_run(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b"{}")
    with pytest.raises(ValueError, match="no trace files"):
        load_run(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_run(tmp_path / "nope")


def test_non_trace_json_is_skipped_with_a_warning(tmp_path: Path) -> None:
    _rank(0, world=1).write(tmp_path / "rank0.json")
    (tmp_path / "config.json").write_bytes(b'{"lr": 0.1}')
    run = load_run(tmp_path)
    assert any(w.startswith("skipped config.json") for w in run.warnings)
    (tmp_path / "rank0.json").unlink()
    with pytest.raises(ValueError, match="no Kineto traces"):
        load_run(tmp_path)


def test_missing_rank_is_a_warning(tmp_path: Path) -> None:
    for r in (0, 1, 3):
        _rank(r, world=4).write(tmp_path / f"rank{r}.json")
    run = load_run(tmp_path)
    assert run.timeline.meta.ranks == (0, 1, 3)
    assert "traces for 3 of 4 ranks; missing 1 rank(s): 2" in run.warnings


def test_duplicate_and_out_of_range_ranks(tmp_path: Path) -> None:
    _rank(0).write(tmp_path / "a.json")
    _rank(0).write(tmp_path / "b.json")
    with pytest.raises(ValueError, match="rank 0 appears twice: a.json and b.json"):
        load_run(tmp_path)
    (tmp_path / "b.json").unlink()
    _rank(5).write(tmp_path / "c.json")
    with pytest.raises(ValueError, match=r"rank\(s\) \[5\] outside world_size 2"):
        load_run(tmp_path)


def test_mismatched_steps_keep_the_common_ones(tmp_path: Path) -> None:
    _rank(0, steps=(1, 2, 3, 4)).write(tmp_path / "rank0.json")
    _rank(1, steps=(2, 3, 4, 5)).write(tmp_path / "rank1.json")
    run = load_run(tmp_path)
    assert run.timeline.meta.profiler_steps_kept == (2, 3)
    assert run.timeline.meta.profiler_steps_dropped == (4,)
    assert "rank 0: dropped profiler step(s) #1 missing on other ranks" in run.warnings
    assert "rank 1: dropped profiler step(s) #5 missing on other ranks" in run.warnings
    assert set(run.timeline.spans["step"]) == {2, 3}


def test_ranks_without_a_common_step(tmp_path: Path) -> None:
    _rank(0, steps=(1, 2)).write(tmp_path / "rank0.json")
    _rank(1, steps=(3, 4)).write(tmp_path / "rank1.json")
    with pytest.raises(ValueError, match=r"ranks share no profiler step \(rank 0: #1, #2; rank 1: #3, #4\)"):
        load_run(tmp_path)
    _rank(1, steps=()).write(tmp_path / "rank1.json")
    with pytest.raises(ValueError, match="rank 1: none"):
        load_run(tmp_path)


def test_no_profiler_steps_keeps_everything_with_a_warning(tmp_path: Path) -> None:
    for r in (0, 1):
        b = TraceBuilder(r)
        b.launched_kernel("gemm", 0, 10, 5)
        b.launched_kernel("gemm", 100, 110, 5)
        b.write(tmp_path / f"rank{r}.json")
    run = load_run(tmp_path)
    assert len(run.timeline) == 4 and set(run.timeline.spans["step"]) == {-1}
    assert any(w.startswith("no ProfilerStep#N in any trace") for w in run.warnings)


def test_rank_from_file_name_when_distributed_info_lacks_it(tmp_path: Path) -> None:
    _rank(None).write(tmp_path / "worker1_step_12.1694128201545.pt.trace.json")
    _rank(0).write(tmp_path / "rank0.json")
    run = load_run(tmp_path)
    assert run.timeline.meta.ranks == (0, 1)
    assert any("no distributedInfo.rank in the trace; took rank 1 from the file name" in w for w in run.warnings)
    assert rank_from_name(Path("sampled_rank-12.json.gz")) == 12
    assert rank_from_name(Path("kineto_3.json")) == 3
    assert rank_from_name(Path("trace.json")) is None


def test_exactly_one_step_keeps_unlinked_gpu_work(tmp_path: Path) -> None:
    b = _rank(0, steps=(7,), world=1)
    b.kernel("orphan_kernel", 500, 10, 999_999)  # no CPU launch with this correlation id
    b.write(tmp_path / "rank0.json")
    run = load_run(tmp_path)
    assert set(run.timeline.spans["name"]) == {"gemm", "orphan_kernel"}
    assert any("1 GPU events have no CPU launch" in w for w in run.warnings)


def test_truncated_file_error_names_the_position(tmp_path: Path) -> None:
    data = orjson.dumps(_rank(0).doc(), option=orjson.OPT_INDENT_2)
    cut = data.index(b'"dur"', len(data) // 2)
    (tmp_path / "rank0.json").write_bytes(data[:cut])
    with pytest.raises(ValueError) as exc:
        load_run(tmp_path)
    line, col = data[:cut].count(b"\n") + 1, cut - data.rfind(b"\n", 0, cut)
    assert f"byte {cut} (line {line}, column {col})" in _one_line(exc)


def test_string_rank_is_an_error_not_a_guess(tmp_path: Path) -> None:
    b = _rank(None, world=1)
    b.extra["distributedInfo"] = {"rank": "0", "world_size": 1}
    b.write(tmp_path / "rank0.json")
    with pytest.raises(ValueError, match=r"rank0.json: distributedInfo.rank is '0'; expected an integer in \[0, 1048575\]"):
        load_run(tmp_path)


def test_big_json_without_trace_events_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "rank0.json").write_bytes(b'{"x": "' + b"a" * (17 << 20) + b'"}')
    with pytest.raises(ValueError, match="rank0.json: not a valid Kineto trace: no traceEvents array in the first 16 MiB"):
        load_run(tmp_path)


def test_analyze_prints_malformed_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli.main import main

    b = _rank(0, world=1)
    b.events.append({"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 5, "dur": None})
    b.write(tmp_path / "rank0.json")
    assert main(["analyze", str(tmp_path)]) == 0
    assert "malformed events skipped: dur_missing 1" in capsys.readouterr().out
