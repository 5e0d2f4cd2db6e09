"""The event-driven flow network on real cluster routes: closed forms, conservation, contention."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.flow.fluid import finish_times
from sim.flow.maxmin import incidence_of
from sim.flow.network import FlowNetwork
from topo import get_cluster
from topo.collectives import CollectiveModel

GiB = 1 << 30


def _model(nodes: int = 1) -> CollectiveModel:
    return CollectiveModel(get_cluster("dgx-h100", nodes=nodes))


def _capacity(model: CollectiveModel) -> np.ndarray:
    return 1.0 / model.router.seconds_per_byte


def _run(capacity: np.ndarray, batches: list[tuple[float, list[tuple[int, ...]], list[float]]]
         ) -> tuple[list[float], FlowNetwork]:
    """Start each (time, paths, bytes) batch at its time; the finish time of each batch."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity, record=True)
    ends = [np.nan] * len(batches)

    def go(i: int, at: float, paths: list[tuple[int, ...]], nbytes: list[float]):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        yield net.transfer(incidence_of(paths), np.array(nbytes), label=str(i))
        ends[i] = env.now

    for i, (at, paths, nbytes) in enumerate(batches):
        env.process(go(i, at, paths, nbytes))
    env.run()
    return ends, net


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_matches_closed_form(n: int) -> None:
    """Ring all-reduce inside an NVSwitch node: 2(n-1)/n * S / B, B = one GPU's NVLink
    (bandwidth x efficiency), whatever the channel count."""
    model = _model()
    size = 1 * GiB
    flows = model.flows("all_reduce", size, range(n), algorithm="ring")
    ends, _ = _run(_capacity(model), [(0.0, [f.edges for f in flows], [f.bytes for f in flows])])
    nvlink = model.cluster.nvlink
    assert nvlink is not None
    bandwidth = nvlink.bandwidth_GBps * 1e9 * nvlink.efficiency
    assert ends[0] == pytest.approx(2 * (n - 1) / n * size / bandwidth, rel=1e-9)


def test_two_flows_sharing_a_nic_each_get_half() -> None:
    """GPU 0 sends to two other nodes at once: both flows leave through GPU 0's NIC, so each
    runs at half the NIC's rate and both take twice as long as one alone."""
    model = _model(nodes=3)
    r = model.router
    a, b = r.route(0, 8)[0], r.route(0, 16)[0]
    shared = set(a) & set(b)
    nic = min(shared, key=lambda e: _capacity(model)[e])
    size = 1e9
    alone, _ = _run(_capacity(model), [(0.0, [a], [size])])
    both, net = _run(_capacity(model), [(0.0, [a], [size]), (0.0, [b], [size])])
    assert alone[0] == pytest.approx(size / _capacity(model)[nic])
    assert both == pytest.approx([2 * alone[0]] * 2)
    assert [s.rates_Bps[0] for s in net.samples[:2]] == pytest.approx([_capacity(model)[nic] / 2] * 2)


def test_later_flow_takes_its_share_from_then_on() -> None:
    """One flow alone for half its bytes, then a second joins on the same link: the first
    finishes at T/2 + (T/2)*2 = 1.5 T; the second, with T/2 of its own work done by then at half
    rate, runs alone afterwards and ends at 2 T."""
    cap = np.array([10.0])
    ends, net = _run(cap, [(0.0, [(0,)], [10.0]), (0.5, [(0,)], [10.0])])
    assert ends == pytest.approx([1.5, 2.0])
    assert net.delivered_bytes == pytest.approx(20.0)


@st.composite
def traffic(draw):  # type: ignore[no-untyped-def]
    """Batches of flows between random GPUs of a 3-node cluster, starting at random times."""
    count = draw(st.integers(1, 5))
    batches = []
    for _ in range(count):
        at = draw(st.floats(0.0, 0.05))
        pairs = draw(st.lists(st.tuples(st.integers(0, 23), st.integers(0, 23)).filter(lambda p: p[0] != p[1]),
                              min_size=1, max_size=4))
        sizes = draw(st.lists(st.floats(1e6, 1e9), min_size=len(pairs), max_size=len(pairs)))
        batches.append((at, pairs, sizes))
    return batches


MODEL3 = _model(nodes=3)


def _routed(batches):  # type: ignore[no-untyped-def]
    return [(at, [MODEL3.router.route(a, b)[0] for a, b in pairs], sizes) for at, pairs, sizes in batches]


@settings(max_examples=40, deadline=None)
@given(traffic())
def test_bytes_delivered_equal_bytes_sent(batches) -> None:  # type: ignore[no-untyped-def]
    ends, net = _run(_capacity(MODEL3), _routed(batches))
    sent = sum(sum(sizes) for _, _, sizes in batches)
    assert net.delivered_bytes == pytest.approx(sent, rel=1e-9)
    assert all(np.isfinite(ends))


@settings(max_examples=40, deadline=None)
@given(traffic())
def test_event_driven_network_equals_static_fluid_when_all_start_at_once(batches) -> None:  # type: ignore[no-untyped-def]
    """All batches at t=0: the network's batch ends are the static solver's last finish per batch."""
    batches = [(0.0, pairs, sizes) for _, pairs, sizes in batches]
    routed = _routed(batches)
    ends, _ = _run(_capacity(MODEL3), routed)
    paths = [p for _, ps, _ in routed for p in ps]
    sizes = np.array([s for _, _, ss in routed for s in ss])
    t = finish_times(_capacity(MODEL3), incidence_of(paths), sizes)
    owner = np.repeat(np.arange(len(routed)), [len(ps) for _, ps, _ in routed])
    assert ends == pytest.approx([t[owner == i].max() for i in range(len(routed))], rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(traffic(), st.tuples(st.floats(0.0, 0.05), st.integers(0, 23), st.integers(0, 23), st.floats(1e6, 1e9)))
def test_adding_a_concurrent_flow_never_speeds_a_collective_up(batches, extra) -> None:  # type: ignore[no-untyped-def]
    """A ring all-reduce across the 3 nodes plus random background traffic: one more flow never
    makes the all-reduce finish earlier."""
    at, a, b, size = extra
    ring = MODEL3.flows("all_reduce", 256e6, range(0, 24, 4), algorithm="ring")
    focal = (0.0, [f.edges for f in ring], [f.bytes for f in ring])
    base, _ = _run(_capacity(MODEL3), [focal, *_routed(batches)])
    more = _routed([*batches, (at, [(a, b)], [size])]) if a != b else _routed(batches)
    loaded, _ = _run(_capacity(MODEL3), [focal, *more])
    assert loaded[0] >= base[0] * (1 - 1e-9)


def test_max_min_rates_are_not_monotone_for_single_flows() -> None:
    """A known property of max-min fairness, stated so nobody relies on the opposite: a new flow
    C that shares only flow B's tight link slows B, and A (sharing a link with B but not with C)
    speeds up. Collective completion is what the monotonicity tests above check."""
    cap = np.array([1.0, 0.2])
    before = finish_times(cap, incidence_of([(0,), (0, 1)]), np.array([1.0, 1.0]))
    after = finish_times(cap, incidence_of([(0,), (0, 1), (1,)]), np.array([1.0, 1.0, 1.0]))
    assert after[0] < before[0]
