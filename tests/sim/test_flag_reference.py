"""Each setting declared once: its flag and its job-file key come from one declaration and accept
exactly the same values; the flag reference (docs/flags.md) is current."""

from __future__ import annotations

import argparse
import contextlib
import io
import math
from pathlib import Path
from typing import Any

import pytest

from core.settings import Declared
from schedules.plan import ParallelPlan
from sim.cli.flag_reference import PATH, render
from sim.cli.job_args import job_from_args, job_settings
from sim.cli.main import build_parser
from sim.job import read_job_file
from sim.job_settings import BY_KEY, SETTINGS, check_settings

LONG = "x" * 300
CANDIDATES: tuple[Any, ...] = (0, 1, 2, 3, 4, 16, 1024, 65536, 65537, 10**7, 10**9, 10**14, -1, 0.0, 0.5, 1.0, 1.5,
                               1e6, 1e16, math.inf, math.nan, True, False, "x", "", LONG, "tp,cp,dp,pp", "tp,dp",
                               "tiny", "dgx-h100")


def _candidates(s: Declared) -> list[Any]:
    """Values of the setting's type (what its flag's text converts to): its vocabulary, numbers in
    and out of range, strings of every kind. (A job file's value of another type is refused by the
    setting's rule, a flag's text of another type by its conversion.)"""
    kind = s.rule.type
    if kind is bool:
        typed = [v for v in CANDIDATES if isinstance(v, bool)]
    elif kind is str:
        typed = [v for v in CANDIDATES if isinstance(v, str)]
    else:
        typed = [v for v in CANDIDATES if isinstance(v, kind if kind is int else int | float) and not isinstance(v, bool)]
    if s.spec.auto:  # "auto" and other texts too
        typed += [v for v in CANDIDATES if isinstance(v, str)] + ["auto"]
    return [*dict.fromkeys((*s.rule.values, *typed)).keys()]


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _argv(s: Declared, value: Any) -> list[str] | None:
    """The flags that give ``value`` (None: a flag cannot say it, e.g. False to a switch)."""
    assert s.flag is not None
    if s.rule.type is bool:
        if not isinstance(value, bool):
            return None  # a boolean flag takes no value
        if value:
            return [s.flag]
        return None if s.spec.switch else ["--no-" + s.flag[2:]]
    return [s.flag, str(value)]


def _by_flag(argv: list[str]) -> bool:
    """Does the command line accept these flags (argparse, then the settings check every run makes)?"""
    parser = build_parser(["simulate"])
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args = parser.parse_args(["simulate", *argv])
        check_settings(job_settings(args))
    except (SystemExit, ValueError):
        return False
    return True


def _by_file(tmp_path: Path, s: Declared, value: Any) -> bool:
    path = tmp_path / "job.toml"
    path.write_text(f"[{s.section}]\n{s.key} = {_toml(value)}\n")
    try:
        read_job_file(path)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("name", [n for n, s in SETTINGS.items() if s.flag is not None])
def test_a_flag_and_its_job_file_key_accept_the_same_values(name: str, tmp_path: Path) -> None:
    s = SETTINGS[name]
    compared = 0
    for value in _candidates(s):
        argv = _argv(s, value)
        if argv is None:
            continue
        assert _by_flag(argv) == _by_file(tmp_path, s, value), (name, value)
        compared += 1
    assert compared >= (1 if s.spec.switch else 2 if s.rule.type is bool else 5)


def test_flags_are_the_declared_settings() -> None:
    parser = build_parser(["simulate"])
    actions = {a.dest: a for a in parser._subparsers._group_actions[0].choices["simulate"]._actions}  # type: ignore[union-attr]
    for name, s in SETTINGS.items():
        action = actions[name]
        assert s.flag in action.option_strings and action.help == s.spec.help, name
        assert not s.rule.values or s.rule.type is bool or tuple(action.choices or ()) == s.rule.values, name
    assert {(s.section, s.key) for s in SETTINGS.values()} == set(BY_KEY)


def test_dtype_fp32_by_flag_and_by_job_file_is_the_same_job(tmp_path: Path) -> None:
    args = ["--model", "tiny", "--cluster", "cpu-host", "--tp", "1", "--pp", "1"]
    job_file = tmp_path / "job.toml"
    job_file.write_text('[model]\nmodel = "tiny"\n[cluster]\ncluster = "cpu-host"\n[plan]\ntp = 1\npp = 1\ndtype = "fp32"\n')
    parser = build_parser(["simulate"])
    by_flag = job_from_args(parser.parse_args(["simulate", *args, "--dtype", "fp32"]))
    by_file = job_from_args(parser.parse_args(["simulate", "--config", str(job_file)]))
    assert by_flag == by_file and by_flag.plan.dtype == "fp32"


def test_the_flag_reference_is_current() -> None:
    assert PATH.read_text() == render(), "run python -m sim.cli.flag_reference"


def test_every_setting_is_in_the_reference_once() -> None:
    text = render()
    for s in SETTINGS.values():
        assert text.count(f"`[{s.section}] {s.key}`") == 1, s.name


def test_auto_is_a_flag_and_a_job_file_value_but_not_a_plan_value(tmp_path: Path) -> None:
    assert _by_flag(["--microbatch-size", "auto"]) and _by_file(tmp_path, SETTINGS["microbatch_size"], "auto")
    assert not _by_flag(["--tp", "auto"]) and not _by_file(tmp_path, SETTINGS["tp"], "auto")
    with pytest.raises(ValueError, match="microbatch_size"):
        ParallelPlan(microbatch_size="auto")  # type: ignore[arg-type]


def test_job_settings_reads_flags_by_declared_dest() -> None:
    namespace = argparse.Namespace(**{name: None for name in SETTINGS}, config=None)
    namespace.framework = "torch"
    namespace.framework_preset = "fsdp2"
    assert job_settings(namespace) == {"framework": "torch", "framework_preset": "fsdp2"}
