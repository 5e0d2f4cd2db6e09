"""Published rows -> the residual table behind the error band (:mod:`sim.accuracy.residuals`), and
the band's leave-one-source-out coverage as table rows and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profiler.validate.published.run import RowResult
from sim.accuracy.coverage import Coverage, coverage_by, held_out
from sim.accuracy.job_class import job_class
from sim.accuracy.residuals import Residual
from sim.summary import round_sig


def residuals_of(results: Sequence[RowResult]) -> list[Residual]:
    """A residual per row with a measured and a simulated step time (file order)."""
    return [Residual(name=r.row.name, source=r.row.family, job=job_class(r.row_job.job),
                     measured_s=r.row.measured_step_s, sim_s=round_sig(r.sim.step_s))
            for r in results if r.row_job is not None and r.sim is not None and r.row.measured_step_s is not None]


GROUPINGS = {"source": lambda r: r.source, "precision": lambda r: r.job.precision,
             "parallelism": lambda r: r.job.parallelism, "generation": lambda r: r.job.generation}


def coverage_tables(residuals: Sequence[Residual]) -> dict[str, list[Coverage]]:
    """Leave-one-source-out coverage grouped each way of :data:`GROUPINGS` (each list ends with "all")."""
    held = held_out(residuals)
    return {name: coverage_by(held, key) for name, key in GROUPINGS.items()}  # type: ignore[arg-type]


def coverage_rows(table: Sequence[Coverage]) -> list[dict[str, str]]:
    """Terminal rows: group, runs, inside the band, share, bands from comparable runs."""
    return [{"group": c.group, "runs": str(c.runs), "inside 80% band": str(c.covered), "coverage": f"{c.fraction:.0%}",
             "band from comparable runs": str(c.comparable)} for c in table]


def coverage_object(tables: dict[str, list[Coverage]]) -> dict[str, Any]:
    """The ``band_coverage`` JSON object."""
    return {name: [{"group": c.group, "runs": c.runs, "covered": c.covered, "coverage": round_sig(c.fraction, 6),
                    "comparable": c.comparable} for c in table] for name, table in tables.items()}
