"""Physical monotonicity of the collective model (hypothesis): a faster NIC never makes a given
NCCL algorithm and protocol slower; more oversubscription or concurrent traffic never makes a
collective faster (NCCL's tuner sees neither, so its choice stays put). A faster NIC may change
NCCL's choice, and NCCL's choice is by its own estimate, so that case holds the choice fixed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topo import OPS, CollectiveModel, Placement, get_cluster

BASES = {
    "aws-p4d": get_cluster("aws-p4d", nodes=8).with_overrides({"nodes_per_leaf": 2}),
    "dgx-h100": get_cluster("dgx-h100", nodes=8).with_overrides({"nodes_per_leaf": 2}),
    "pcie-4090": get_cluster("pcie-4090", nodes=4).with_overrides({"nodes_per_leaf": 2}),
}
MODELS: dict[tuple, CollectiveModel] = {}


def model(name: str, nic_scale: float = 1.0, oversubscription: float = 1.0) -> CollectiveModel:
    """Models are cached per variant so hypothesis examples reuse their caches."""
    key = (name, nic_scale, oversubscription)
    if key not in MODELS:
        spec = BASES[name]
        nic = spec.nic.with_overrides({"bandwidth_GBps": spec.nic.bandwidth_GBps * nic_scale})  # type: ignore[union-attr]
        MODELS[key] = CollectiveModel(spec.with_overrides({"nic": nic, "oversubscription": oversubscription}))
    return MODELS[key]


@st.composite
def jobs(draw: st.DrawFn) -> tuple[str, str, float, tuple[int, ...], list[tuple[int, ...]]]:
    name = draw(st.sampled_from(sorted(BASES)))
    world = BASES[name].num_gpus
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if world % d == 0]))
    dp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if (world // tp) % d == 0]))
    order = draw(st.permutations(("tp", "cp", "dp", "pp")))
    placement = Placement(sizes={"tp": tp, "dp": dp, "pp": world // (tp * dp)}, order=tuple(order))
    dim = draw(st.sampled_from(("tp", "dp", "pp")))
    groups = placement.groups(dim)
    concurrent = groups if draw(st.booleans()) else []
    op = draw(st.sampled_from(OPS))
    size = draw(st.floats(min_value=1e3, max_value=1e10))
    return name, op, size, groups[draw(st.integers(0, len(groups) - 1))], concurrent


@settings(max_examples=60, deadline=None)
@given(job=jobs(), scale=st.floats(min_value=1.0, max_value=8.0))
def test_faster_nic_is_never_slower(job, scale: float) -> None:
    name, op, size, group, concurrent = job
    slow = model(name).collective(op, size, group, concurrent=concurrent)
    choice = {} if not slow.protocol else {"algorithm": slow.algorithm, "protocol": slow.protocol}
    fast = model(name, nic_scale=round(scale, 2)).collective(op, size, group, concurrent=concurrent,
                                                              **choice)
    assert fast.time_s <= slow.time_s * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(job=jobs(), more=st.sampled_from([1.5, 2.0, 4.0]))
def test_more_oversubscription_is_never_faster(job, more: float) -> None:
    name, op, size, group, concurrent = job
    base = model(name).collective(op, size, group, concurrent=concurrent)
    worse = model(name, oversubscription=more).collective(op, size, group, concurrent=concurrent)
    assert worse.time_s >= base.time_s * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(job=jobs())
def test_concurrent_groups_never_speed_a_group_up(job) -> None:
    name, op, size, group, concurrent = job
    alone = model(name).collective(op, size, group)
    together = model(name).collective(op, size, group, concurrent=concurrent)
    assert together.time_s >= alone.time_s * (1 - 1e-12)
