"""Max-min fairness of sim.flow.maxmin: closed forms and the defining invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.flow.fluid import finish_times
from sim.flow.maxmin import incidence_of, maxmin_rates

TOL = 1e-9


@st.composite
def networks(draw):  # type: ignore[no-untyped-def]
    """Random links (capacities) and flows (non-empty link subsets, optional rate caps)."""
    links = draw(st.integers(1, 6))
    capacity = np.array(draw(st.lists(st.floats(0.5, 100.0), min_size=links, max_size=links)))
    paths = draw(st.lists(st.sets(st.integers(0, links - 1), min_size=1, max_size=links)
                          .map(lambda s: tuple(sorted(s))), min_size=1, max_size=8))
    caps = draw(st.lists(st.one_of(st.just(np.inf), st.floats(0.1, 200.0)),
                         min_size=len(paths), max_size=len(paths)))
    return capacity, paths, np.array(caps)


def test_two_flows_on_one_link_get_half_each() -> None:
    rates = maxmin_rates(np.array([50e9]), incidence_of([(0,), (0,)]))
    assert rates == pytest.approx([25e9, 25e9])


def test_textbook_example() -> None:
    """Bertsekas & Gallager's shape: a 4-capacity link shared by two flows, one of which also
    crosses a 10-capacity link shared with a third flow: 2, 2 and 8."""
    rates = maxmin_rates(np.array([4.0, 10.0]), incidence_of([(0,), (0, 1), (1,)]))
    assert rates == pytest.approx([2.0, 2.0, 8.0])


def test_cap_frees_capacity_for_the_others() -> None:
    rates = maxmin_rates(np.array([10.0]), incidence_of([(0,), (0,), (0,)]), np.array([1.0, np.inf, np.inf]))
    assert rates == pytest.approx([1.0, 4.5, 4.5])


@settings(max_examples=200, deadline=None)
@given(networks())
@pytest.mark.slow
def test_feasible_and_every_flow_has_a_bottleneck(net) -> None:  # type: ignore[no-untyped-def]
    """The max-min characterization: rates fit the links, and every flow is either at its cap or
    crosses a saturated link on which no flow has a higher rate."""
    capacity, paths, caps = net
    rates = maxmin_rates(capacity, incidence_of(paths), caps)
    load = np.zeros(len(capacity))
    for p, r in zip(paths, rates, strict=True):
        load[list(p)] += r
    assert np.all(load <= capacity * (1 + TOL))
    for f, (p, r) in enumerate(zip(paths, rates, strict=True)):
        if r >= caps[f] * (1 - TOL):
            continue
        on = [e for e in p if load[e] >= capacity[e] * (1 - 1e-7)]
        assert any(all(r >= rates[g] * (1 - 1e-7) for g, q in enumerate(paths) if e in q) for e in on), f


@settings(max_examples=100, deadline=None)
@given(networks(), st.lists(st.floats(1.0, 1e3), min_size=8, max_size=8))
@pytest.mark.slow
def test_fluid_delivers_every_byte_no_faster_than_capacity(net, sizes) -> None:  # type: ignore[no-untyped-def]
    """Each flow finishes no sooner than its bytes over its tightest link (or its cap), and the
    last finish is no sooner than the busiest link's bytes over its capacity."""
    capacity, paths, caps = net
    nbytes = np.array(sizes[: len(paths)])
    t = finish_times(capacity, incidence_of(paths), nbytes, caps)
    alone = np.array([b / min(min(capacity[list(p)]), c) for p, b, c in zip(paths, nbytes, caps, strict=True)])
    assert np.all(t >= alone * (1 - 1e-7))
    load = np.zeros(len(capacity))
    for p, b in zip(paths, nbytes, strict=True):
        load[list(p)] += b
    assert t.max() >= (load / capacity).max() * (1 - 1e-7)
