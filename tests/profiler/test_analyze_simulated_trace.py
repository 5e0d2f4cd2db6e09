"""``analyze`` given the simulator's own Chrome trace says what the file is (it used to say "no
spans inside any step", then "no distributedInfo.rank")."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.chrome_trace import write_chrome_trace
from sim.cli.main import main
from sim.job import resolve_job
from sim.simulate import simulate


def test_analyze_names_a_simulated_chrome_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = resolve_job({"model": "tiny", "cluster": "dgx-h100", "nodes": 1, "tp": 1, "pp": 2, "global_batch": 8})
    path = write_chrome_trace(simulate(job).timeline, tmp_path / "sim.json")
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "Chrome trace that trainsim wrote" in err and "trainsim profile" in err
