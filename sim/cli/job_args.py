"""Flags shared by ``simulate`` and ``compare``: model, plan, cluster and simulation settings, one
per declared setting (:mod:`sim.job_settings`): its name, help, valid values and placeholder
come from its declaration, so a flag accepts what its job-file key accepts."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from core.settings import Declared
from sim.job import DEFAULT_JOB, Job, read_job_file, resolve_job
from sim.job_settings import SETTINGS

GROUPS = {"model": "model (a preset, or dimensions)", "plan": "parallel plan", "framework": "parallel plan",
          "cluster": "cluster", "sim": "simulation"}
"""The help section of each job-file section's flags."""


def add_job_arguments(parser: argparse.ArgumentParser, with_schedule: bool = True) -> None:
    """Add every job flag; unset flags stay None so a --config file can fill them
    (``with_schedule``: also --schedule, which compare sets itself)."""
    parser.add_argument("--config", metavar="JOB.toml", help="job file ([model], [plan], [cluster], [sim]); flags override it")
    groups: dict[str, argparse._ArgumentGroup] = {}
    for setting in SETTINGS.values():
        if setting.flag is None or (setting.name == "schedule" and not with_schedule):
            continue
        title = setting.spec.group or GROUPS[setting.section]
        add_flag(groups.get(title) or groups.setdefault(title, parser.add_argument_group(title)), setting)


def add_flag(group: argparse._ArgumentGroup, setting: Declared) -> None:
    """The flag of ``setting``: ``--x``/``--no-x`` for a boolean (``--x`` alone for a switch), else a
    value converted to the rule's type and, for a closed vocabulary, one of its values."""
    assert setting.flag is not None
    rule, spec = setting.rule, setting.spec
    options: dict[str, Any] = {"dest": setting.name, "default": None, "help": spec.help}
    if spec.metavar:
        options["metavar"] = spec.metavar
    if rule.type is bool:
        group.add_argument(setting.flag, action="store_true" if spec.switch else argparse.BooleanOptionalAction,
                           **options)
        return
    kind: Callable[[str], Any] = _or_auto(rule.type) if spec.auto else rule.type
    group.add_argument(setting.flag, type=kind, choices=rule.values or None, **options)


def _or_auto(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """A flag's value of ``kind``, or "auto"."""
    def convert(text: str) -> Any:
        if text == "auto":
            return text
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {_NAMES.get(kind, 'a value')} or auto, got {text!r}") from None
    return convert


_NAMES: dict[Any, str] = {int: "an integer", float: "a number"}


JOB_DESTS = tuple(SETTINGS)  # every setting has a flag (dest = the setting's key)


def job_settings(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """Settings from --config merged with the flags (flags win), plus ``overrides``."""
    settings: dict[str, Any] = read_job_file(args.config) if getattr(args, "config", None) else {}
    for dest in JOB_DESTS:
        value = getattr(args, dest, None)
        if value is not None:
            settings[dest] = value
    settings.update({k: v for k, v in overrides.items() if v is not None})
    return settings


def job_from_args(args: argparse.Namespace, **overrides: Any) -> Job:
    """The Job the flags (and --config) describe: the embedded default job (:data:`sim.job.DEFAULT_JOB`)
    with every setting given replaced."""
    return resolve_job(job_settings(args, **overrides), defaults=DEFAULT_JOB)
