"""The settings of a job, one table made from their declarations: what each key accepts, in which
job-file section it lives.

Every setting is declared once, as a field of a config dataclass (:mod:`core.settings`): the
plan's concerns (:data:`schedules.plan.CONCERNS`) and the job's other sections
(:mod:`sim.job_sections`). Job files (:func:`sim.job.read_job_file`), command-line flags
(:mod:`sim.cli.job_args`) and :func:`sim.job.resolve_job` check every value through
:func:`check_setting`, so a bad value gives the same one-line error wherever it comes from: the
field, the value (shortened when long) and what is valid, e.g.
``plan.tp='four' is invalid: expected an integer in [1, 65536]``.

Upper bounds refuse values no run could use (``layers = 1000000000``); what a valid but large
plan costs is the size guard's business (:mod:`sim.size_guard`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import invalid
from core.settings import Declared, declared
from schedules.plan import CONCERNS
from sim.job_sections import BatchSection, ClusterSection, ModelSection, SimSection

DECLARATIONS = (ModelSection, *CONCERNS, BatchSection, ClusterSection, SimSection)
"""Where the settings are declared, in the order flags, job files and the flag reference list them."""
SETTINGS: Mapping[str, Declared] = {d.name: d for cls in DECLARATIONS for d in declared(cls)}
SECTIONS: Mapping[str, tuple[str, ...]] = {
    section: tuple(k for k, s in SETTINGS.items() if s.section == section)
    for section in dict.fromkeys(s.section for s in SETTINGS.values())}
BY_KEY: Mapping[tuple[str, str], str] = {(s.section, s.key): name for name, s in SETTINGS.items()}
"""(job-file section, key) -> the setting's name (``[framework] preset`` is ``framework_preset``)."""


def check_setting(key: str, value: Any, field: str | None = None) -> None:
    """Raise a one-line ValueError unless ``value`` is valid for ``key`` (named ``field`` in it)."""
    setting = SETTINGS.get(key)
    if setting is None:
        raise invalid(field or key, value, "unknown setting; valid: " + ", ".join(SETTINGS))
    if not setting.rule.accepts(value):
        raise invalid(field or key, value, setting.rule.what)


def check_settings(settings: Mapping[str, Any]) -> None:
    """:func:`check_setting` on every non-None value."""
    for key, value in settings.items():
        if value is not None:
            check_setting(key, value)
