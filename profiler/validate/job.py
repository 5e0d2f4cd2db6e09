"""The simulator's Job for a recorded run: the manifest's model and plan, as the trainer ran it.

The trainer (profiler/trainer) runs sequence parallelism whenever TP > 1, AdamW, FSDP2 units per
block, ZeRO-1 by broadcasts and torch.distributed.pipelining's schedules: the plan says so with
``framework="torch"``. fp32 runs (CPU) use the plan dtype ``fp32``. A gloo run on CPUs is
simulated on the ``cpu-host`` cluster with one "GPU" (process) per rank on one node, unless a
cluster is given.

Speed: this VM changes speed by up to 1.5x between recordings (other tenants of the host), so
each recording carries a speed probe, and so does a profile's calibration
(:mod:`profiler.calibrate.probe`). With ``speed`` != 1 (the machine ran ``speed`` times faster
than during calibration) every simulated duration is scaled by 1/speed: device peaks and memory
bandwidth, link bandwidths and collective bandwidths times ``speed``; the per-op, per-call and
per-hop overheads divided by it (on a CPU host every one of them is CPU work).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from profiler.trainer.config import SCHEDULES
from schedules.model import ModelSpec
from schedules.plan import ParallelPlan
from sim.job import Job
from topo import ClusterSpec, get_cluster
from topo.collective_fit import CollectiveFit
from topo.hardware_profile import HardwareProfile

CPU_CLUSTER = "cpu-host"


def plan_for_run(config: dict[str, Any], dtype: str) -> ParallelPlan:
    """The simulator plan of a manifest's ``config`` (the trainer's resolved TrainConfig)."""
    info = SCHEDULES[config["schedule"]]
    tp = int(config["tp"])
    return ParallelPlan(tp=tp, pp=int(config["pp"]), dp=int(config["dp"]), vpp=int(config["vpp"]),
                        microbatch_size=int(config["microbatch_size"]),
                        global_batch=int(config["global_batch"]), zero=int(config["zero"]),
                        sequence_parallel=tp > 1, recompute=str(config.get("recompute", "none")),
                        schedule=info.plan_name, dtype="fp32" if dtype == "fp32" else "bf16",
                        framework="torch", offload=str(config.get("offload", "none")), ep=int(config.get("ep", 1)),
                        # a one-stage pipeline without PP too: the stage reduces after its last backward
                        overlap_grad_reduce=False)


def cluster_for_run(manifest: dict[str, Any], cluster: ClusterSpec | None) -> ClusterSpec:
    """The given cluster, or for a CPU run the cpu-host preset with every rank on one node."""
    if cluster is not None:
        return cluster
    world = int(manifest["world_size"])
    if manifest.get("device_type", "cpu") != "cpu":
        raise ValueError(f"run on {manifest.get('device_type')!r} devices: pass the cluster it ran on "
                         "(--cluster, a preset or a cluster TOML file)")
    base = get_cluster(CPU_CLUSTER)
    host = base.host.with_overrides({"cpu_cores": int(manifest.get("cpu_count") or base.host.cpu_cores)})
    return dataclasses.replace(base, gpus_per_node=world, nodes=1, host=host)


SPEED_FIELDS = ("peak_fp32_flops", "peak_tf32_flops", "peak_bf16_flops", "peak_fp16_flops",
                "peak_fp8_flops", "hbm_GBps")
OVERHEAD_FIELDS = ("kernel_overhead_s", "collective_overhead_s", "host_overhead_s", "tp_overhead_s",
                   "tp_host_overhead_s", "tp_comm_overhead_s", "optimizer_overhead_s",
                   "dtensor_optimizer_overhead_s")


def scale_speed(cluster: ClusterSpec, fits: tuple[CollectiveFit, ...], speed: float
                ) -> tuple[ClusterSpec, tuple[CollectiveFit, ...]]:
    """The cluster and fits of a machine ``speed`` times faster (see the module docstring)."""
    if speed == 1.0:
        return cluster, fits
    d = cluster.device
    device = d.with_overrides({**{f: getattr(d, f) * speed for f in SPEED_FIELDS},
                               **{f: getattr(d, f) / speed for f in OVERHEAD_FIELDS}})
    links = {role: link.with_overrides({"bandwidth_GBps": link.bandwidth_GBps * speed,
                                        "latency_s": link.latency_s / speed})
             for role in ("nvlink", "pcie", "nic", "socket_link")
             if (link := getattr(cluster, role)) is not None}
    scaled = tuple(dataclasses.replace(f, alpha_s=f.alpha_s / speed, alpha_per_rank_s=f.alpha_per_rank_s / speed,
                                       busbw_GBps=f.busbw_GBps * speed) for f in fits)
    host = cluster.host.with_overrides({"sched_delay_s": cluster.host.sched_delay_s / speed})
    return dataclasses.replace(cluster, device=device, host=host, **links), scaled


def job_for_run(manifest: dict[str, Any], *, profile: HardwareProfile | None = None,
                cluster: ClusterSpec | None = None, steps: int = 1, speed: float = 1.0) -> Job:
    """Every rank of the run's configuration simulated (no folding) on its cluster + profile,
    on a machine ``speed`` times faster than at calibration."""
    config = manifest.get("config")
    if not config or "model" not in config:
        raise ValueError("manifest has no trainer config (config.model): not a trainsim profile run")
    model = ModelSpec(**config["model"])
    plan = plan_for_run(config, str(manifest.get("dtype", config.get("dtype", "fp32"))))
    base = cluster_for_run(manifest, cluster)
    fits = profile.collectives if profile is not None else ()
    target = profile.apply(base) if profile is not None else base
    target, fits = scale_speed(target, fits, speed)
    return Job(model=model, plan=plan, cluster=target, steps=steps, folded=False, detail="op",
               collective_fits=fits)
