"""The validation residuals an error band rests on: for each simulated published run, its
comparison features and its measured and simulated step times.

The table is written by ``trainsim validate --published all --update-band`` from the repository's
calibration files (``profiler.validate.published.rows.CALIBRATION_FILES``) and committed as
``sim/accuracy/residuals.json``; a test re-simulates them and checks the file is current, so the
band always describes the model it ships with.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from sim.accuracy.job_class import JobClass

RESIDUALS_FILE = Path(__file__).with_name("residuals.json")
GENERATED_BY = "trainsim validate --published all --update-band"


@dataclass(frozen=True, kw_only=True)
class Residual:
    """One published run under the current model (times in seconds).

    Attributes:
        name: the run's name in its file.
        source: its source group (the unit of leave-one-source-out).
        job: its comparison features.
        measured_s: the measured step time.
        sim_s: the simulated step time.
    """

    name: str
    source: str
    job: JobClass
    measured_s: float
    sim_s: float

    @property
    def log_ratio(self) -> float:
        """ln(measured / simulated): > 0 where the model is too fast."""
        return math.log(self.measured_s / self.sim_s)


def residuals_json(rows: list[Residual], files: list[str]) -> str:
    """The residuals table as stable JSON text (sorted keys, one row per line)."""
    body = ",\n".join("    " + json.dumps({**asdict(r), "job": asdict(r.job)}, sort_keys=True) for r in rows)
    head = json.dumps({"generated_by": GENERATED_BY, "files": files}, sort_keys=True)[:-1]
    return f'{head}, "rows": [\n{body}\n]}}\n'


def parse_residuals(text: str) -> tuple[Residual, ...]:
    """The rows of a residuals table (:func:`residuals_json`'s format)."""
    data = json.loads(text)
    return tuple(Residual(name=r["name"], source=r["source"], job=JobClass(**r["job"]),
                          measured_s=r["measured_s"], sim_s=r["sim_s"]) for r in data["rows"])


@cache
def shipped_residuals() -> tuple[Residual, ...]:
    """The committed table (empty when it is absent, e.g. before the first ``--update-band``)."""
    return parse_residuals(RESIDUALS_FILE.read_text()) if RESIDUALS_FILE.is_file() else ()
