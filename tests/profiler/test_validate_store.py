"""The compact stored Timeline gives the same metrics as the parsed traces; manifests map to the
plan the trainer ran."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.timeline_meta import TimelineMeta
from profiler.validate.job import cluster_for_run, job_for_run, plan_for_run
from profiler.validate.measured import step_figures
from profiler.validate.store import read_timeline, write_timeline
from sim.metrics import step_metrics

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "tp2pp2dp2-interleaved"


@pytest.mark.slow
def test_store_round_trip_keeps_metrics(tmp_path: Path) -> None:
    from profiler.kineto import load_run
    from profiler.measured import measured_timeline

    tl = measured_timeline(load_run(SAMPLE))
    write_timeline(tl, tmp_path)
    back = read_timeline(tmp_path)
    assert len(back) == len(tl)
    a, b = step_metrics(tl), step_metrics(back)
    assert b.step_time_s == pytest.approx(a.step_time_s, abs=1e-8)
    assert b.bubble_fraction == pytest.approx(a.bubble_fraction, abs=1e-6)
    assert b.exposed_comm_fraction == pytest.approx(a.exposed_comm_fraction, abs=1e-6)
    assert back.meta.rank_pp == tl.meta.rank_pp
    assert list(back.spans["kind"].astype(str)) == list(tl.spans["kind"].astype(str))
    first = (tmp_path / "timeline.json.gz").read_bytes()
    write_timeline(back, tmp_path)
    assert (tmp_path / "timeline.json.gz").read_bytes() == first  # deterministic bytes


@pytest.mark.slow
def test_step_figures_are_medians_over_steps() -> None:
    from profiler.kineto import load_run
    from profiler.measured import measured_timeline

    tl = measured_timeline(load_run(ROOT / "traces" / "dp4-zero3"))
    figures = step_figures(tl)
    assert figures.steps == 1 and figures.step_time_s == pytest.approx(step_metrics(tl).step_time_s)
    assert set(figures.stage_busy_s) == {0}


def test_manifest_maps_to_the_trainers_plan() -> None:
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    plan = plan_for_run(manifest["config"], manifest["dtype"])
    assert (plan.tp, plan.pp, plan.dp, plan.vpp, plan.zero) == (2, 2, 2, 2, 1)
    assert plan.sequence_parallel and plan.framework == "torch" and plan.dtype == "fp32"
    assert plan.schedule == "interleaved"
    cluster = cluster_for_run(manifest, None)
    assert cluster.num_gpus == 8 and cluster.nodes == 1 and cluster.intra_node == "host"
    assert cluster.host.cpu_cores == manifest["cpu_count"]
    job = job_for_run(manifest, speed=2.0)
    slow = job_for_run(manifest)
    assert job.cluster.device.peak_fp32_flops == pytest.approx(2 * slow.cluster.device.peak_fp32_flops)
    assert job.cluster.device.kernel_overhead_s == pytest.approx(slow.cluster.device.kernel_overhead_s / 2)
    assert not job.folded


def test_gpu_runs_need_their_cluster() -> None:
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    with pytest.raises(ValueError, match="cluster"):
        cluster_for_run({**manifest, "device_type": "cuda"}, None)


def test_run_speed_compares_the_reference_run_with_calibration(tmp_path: Path) -> None:
    from profiler.validate.compare import run_speed
    from topo.hardware_profile import HardwareProfile

    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    model = manifest["config"]["model"]["name"]
    profile = HardwareProfile(meta={"reference_step_s": json.dumps({model: 0.3})})
    assert run_speed(tmp_path, profile) == 1.0  # no reference recorded with the run
    (tmp_path / "recording.json").write_text(json.dumps({"reference": {"run": "calib-x", "step_s": 0.6}}))
    assert run_speed(tmp_path, profile) == pytest.approx(0.5)  # the machine ran at half speed
    assert run_speed(tmp_path, None) == 1.0


def test_rank_windows_follow_each_ranks_previous_step() -> None:
    from profiler.validate.measured import with_rank_windows
    from sim.timeline import TimelineBuilder

    b = TimelineBuilder()
    for rank, spans in {0: [(0, 0.0, 1.0), (1, 1.0, 3.0)], 1: [(0, 0.5, 2.0), (1, 2.0, 2.5)]}.items():
        for step, start, end in spans:
            b.add(rank=rank, lane="compute", kind="fwd", name="F", start_s=start, end_s=end, step=step)
    tl = with_rank_windows(b.build(TimelineMeta(rank_pp={0: 0, 1: 1})), skip_steps=1)
    assert sorted(tl.meta.step_windows or ()) == [(0, 1, 1.0, 3.0), (1, 1, 2.0, 2.5)]
    figures = step_figures(tl)
    assert figures.step_time_s == pytest.approx(2.0)


def test_lane_kind_seconds_count_nested_spans_once() -> None:
    """A c10d call and the gloo span inside it are one all-reduce: 10 ms, not 18 ms; per (rank,
    step) means over two ranks."""
    from profiler.validate.measured import lane_kind_seconds
    from sim.timeline import TimelineBuilder

    b = TimelineBuilder()
    for rank in (0, 1):
        b.add(rank=rank, lane="comm.dp", kind="all_reduce", name="c10d::allreduce_", start_s=0.0, end_s=0.010)
        b.add(rank=rank, lane="comm.dp", kind="all_reduce", name="gloo:all_reduce", start_s=0.002, end_s=0.010)
        b.add(rank=rank, lane="compute", kind="bwd", name="MmBackward0", start_s=0.0, end_s=0.004 * (rank + 1))
    table = lane_kind_seconds(b.build()).set_index(["lane", "kind"])["seconds"]
    assert table[("comm.dp", "all_reduce")] == pytest.approx(0.010)
    assert table[("compute", "bwd")] == pytest.approx(0.006)


STORED = Path(__file__).resolve().parents[2] / "traces" / "calib-dp2-tiny" / "timeline.json.gz"


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """Damage: set the entry at the dotted ``path`` (list indices as numbers) to ``value``."""
    def damage(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value
    return damage


@pytest.mark.parametrize("damage,named", [
    (_set("columns.rank", 3), "columns.rank=3"),
    (_set("columns.dur_ns.5", -1), "columns.dur_ns[5]=-1"),
    (_set("columns.step.0", "x"), "columns.step[0]='x'"),
    (_set("columns.layer.7", 1.5), "columns.layer[7]=1.5"),
    (_set("columns.name.2", 10**6), "columns.name[2]=1000000"),  # beyond the vocabulary: was an IndexError
    (_set("columns.kind", []), "columns.kind='0 entries'"),  # shorter than the others: was an IndexError
    (_set("columns.bytes.1", None), "columns.bytes[1]=None"),
    (_set("vocab.lane", [1]), "vocab.lane=[1]"),
    (_set("meta.world_size", 0), "meta.world_size=0"),
    (_set("meta.source", []), "meta.source=[]"),  # was a TypeError (unhashable)
    (_set("meta.rank_pp", {"0": "x"}), "meta.rank_pp"),
    (_set("meta.step_windows", [[0, 2, 1.0, 0.5]]), "meta.step_windows[0]"),
    (_set("format", "other/1"), "not a trainsim-timeline/1 file"),
])
def test_a_damaged_stored_timeline_is_one_line_naming_the_key(tmp_path: Path, damage: Callable[[dict[str, Any]], None],
                                                             named: str) -> None:
    data = json.loads(gzip.decompress(STORED.read_bytes()))
    damage(data)
    (tmp_path / "timeline.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    with pytest.raises(ValueError) as err:
        read_timeline(tmp_path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(tmp_path / "timeline.json.gz")) and named in text, text
