"""A simulation prices every graph it builds with one TaskCoster and sizes memory with one
MemoryModel: the steady-state run (several shorter graphs), the flow network and the straggler
model share the run's pricer; the summary reads the run's memory model. (A process keeps a job's
pricer for its next simulation, :func:`sim.simulate.job_coster`: cleared here, so the run makes its own.)"""

from __future__ import annotations

from typing import Any

import pytest

import sim.memory
import sim.pricing
from sim.job import resolve_job
from sim.simulate import job_coster, simulate
from sim.summary import summarize

JOBS = [
    {},  # the default job: the steady-state path (shorter graphs extended)
    {"fidelity": "flow", "steps": 1},  # the flow network prices with the run's coster
    {"jitter_cv": 0.01},  # the straggler model sizes its groups with it
    {"framework": "torch", "zero": 3, "tp": 2, "pp": 2, "offload": "optimizer"},
]


@pytest.mark.parametrize("settings", JOBS)
def test_one_task_coster_and_one_memory_model(settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    made = {"coster": 0, "memory": 0}

    def count(cls: type, key: str) -> None:
        init = cls.__init__

        def counted(self: Any, *args: Any, **kwargs: Any) -> None:
            made[key] += 1
            init(self, *args, **kwargs)
        monkeypatch.setattr(cls, "__init__", counted)

    job_coster.cache_clear()  # another test may have simulated the same job in this process
    count(sim.pricing.TaskCoster, "coster")
    count(sim.memory.MemoryModel, "memory")
    summarize(simulate(resolve_job(settings)))
    assert made == {"coster": 1, "memory": 1}
