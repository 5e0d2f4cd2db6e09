"""When a process loads the list kernel: once its reference passes, counted with the one about
to run, reach what loading costs (KERNEL_MIN_TASKS task visits), never for one small job."""

from __future__ import annotations

import pytest

import sim.list_passes as passes


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A process with numba and no kernel loaded yet; the list records each load."""
    calls: list[int] = []
    monkeypatch.setattr(passes, "_state", {"loaded": False, "reference_tasks": 0, "numba": True})
    monkeypatch.delenv("TRAINSIM_KERNEL", raising=False)

    def load() -> bool:
        calls.append(1)
        passes._state["loaded"] = True
        return True

    monkeypatch.setattr(passes, "prefer_kernel", load)
    return calls


def test_small_passes_run_on_the_reference_until_they_have_cost_a_load(loads: list[int]) -> None:
    small = passes.KERNEL_MIN_TASKS // 4 - 1
    assert [passes.use_kernel(small) for _ in range(4)] == [False, False, False, False]
    assert not loads
    assert passes.use_kernel(10)  # the fifth reaches the threshold: loaded, and it runs on the kernel
    assert loads == [1]
    assert passes.use_kernel(1) and loads == [1, 1]  # later passes: on the kernel (prefer_kernel is a no-op once loaded)


def test_one_large_graph_loads_it_at_once(loads: list[int]) -> None:
    assert passes.use_kernel(passes.KERNEL_MIN_TASKS)
    assert loads == [1]


def test_without_numba_nothing_is_counted_or_loaded(loads: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSIM_KERNEL", "0")
    assert not passes.use_kernel(10 * passes.KERNEL_MIN_TASKS)
    assert not loads and passes._state["reference_tasks"] == 0
