"""The simulator (and trace analysis) run with torch unimportable: torch is only the trainer's extra."""

import subprocess
import sys
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[2] / "traces"
BLOCK_TORCH = "import sys; sys.modules['torch'] = None; from sim.cli.main import main; sys.exit(main(sys.argv[1:]))"


def run_without_torch(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_simulate_needs_no_torch(tmp_path):
    out = run_without_torch("simulate", "--json", "--report", "report.html", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "report.html").exists()


@pytest.mark.slow  # a subprocess
def test_analyze_needs_no_torch(tmp_path):
    out = run_without_torch("analyze", str(TRACES / "pp2-zbv"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"step_time_s"' in out.stdout
