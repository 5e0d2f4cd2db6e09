"""The committed hardware profiles are what `trainsim calibrate --samples` fits from their committed
samples and calibration runs under the current model (nothing edited by hand; a model change
that moves a fit is caught here, and the profile is refitted with the command below)."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from sim.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PROFILES = {  # profile -> (samples, directory holding its calib-* runs)
    "this-host": ("profiles/this-host.samples.json", "traces"),
    "session-2026-11-26": ("profiles/session-2026-11-26.samples.json", "traces/session-2026-11-26"),
}


@pytest.mark.slow  # a calibration fit each (1.5-4 s CPU)
@pytest.mark.parametrize("name", list(PROFILES))
def test_profile_refits_byte_for_byte(name: str, tmp_path: Path) -> None:
    samples, runs_dir = PROFILES[name]
    out = tmp_path / f"{name}.toml"
    runs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / runs_dir).glob("calib-*"))
    assert runs
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["calibrate", "--samples", samples, *runs, "--out", str(out)])
    finally:
        os.chdir(cwd)
    assert code == 0 and out.read_bytes() == (ROOT / "profiles" / f"{name}.toml").read_bytes()
