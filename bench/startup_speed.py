"""Benchmark: how soon a process gives its first result — `trainsim simulate --json --no-report`.

Each row runs a command N times in fresh processes (after one unmeasured run, so the bytecode
caches are written: PYTHONDONTWRITEBYTECODE is dropped from the children's environment, as an
installed package's modules are compiled once) and prints the median and range of its wall seconds and the median of its CPU
seconds (user + system, from the children's rusage). Rows: the bare interpreter, the imports of
`trainsim simulate` alone, and the whole command on the default job; ``--cases`` adds the folded
cases of bench/simulate_speed.py as whole commands. Target (issue 29): the default job's first
result in <= 0.25 s, every bench configuration's in <= 0.5 s.

    python bench/startup_speed.py              # the default job, 5 runs per row
    python bench/startup_speed.py --cases -n 3 # and the large folded cases
    python bench/startup_speed.py --src /tmp/base # another checkout's tree (python -P -m sim.cli.main)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simulate_speed import CASES  # noqa: E402 (a sibling script)

SIMULATE = ["simulate", "--json", "--no-report"]


def trainsim(src: str | None) -> list[str]:
    """The `trainsim` console script beside this interpreter, else ``python -m sim.cli.main``
    (always, with ``-P``, for another tree ``src``: it comes first on PYTHONPATH)."""
    if src:
        return [sys.executable, "-P", "-m", "sim.cli.main"]
    script = Path(sys.executable).with_name("trainsim")
    found = str(script) if script.exists() else shutil.which("trainsim")
    return [found] if found else [sys.executable, "-m", "sim.cli.main"]


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command`` (its output discarded; it must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def row(name: str, command: list[str], runs: int) -> None:
    """Print the median (and range) wall and median CPU seconds of ``runs`` runs of ``command``."""
    timed(command)  # warm: bytecode caches, the page cache
    walls, cpus = zip(*(timed(command) for _ in range(runs)), strict=True)
    print(f"{name:72} {statistics.median(walls):8.3f} {min(walls):6.3f}-{max(walls):<6.3f} "
          f"{statistics.median(cpus):8.3f}")


def main() -> None:
    """Print one line per command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=5, help="measured runs per row (default 5)")
    parser.add_argument("--cases", action="store_true", help="also the folded cases of bench/simulate_speed.py")
    parser.add_argument("--src", help="run the trainsim tree at SRC (a checkout) instead of the installed one")
    opts = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if opts.src:
        os.environ["PYTHONPATH"] = str(Path(opts.src).resolve())
    command = trainsim(opts.src)
    python = [sys.executable, "-P"] if opts.src else [sys.executable]
    os.chdir(Path(__file__).resolve().parent.parent)  # ../shared relative paths, as the CLI's docs use
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; "
          f"{opts.runs} runs per row; command: {' '.join(command)}")
    print(f"{'process':72} {'wall s':>8} {'range':>13} {'cpu s':>8}")
    row("python -c pass (the interpreter)", [*python, "-c", "pass"], opts.runs)
    row("python -c 'import sim.cli.cmd_simulate' (its imports)",
        [*python, "-c", "import sim.cli.main, sim.cli.cmd_simulate"], opts.runs)
    row("trainsim simulate --json --no-report (the default job)", [*command, *SIMULATE], opts.runs)
    for name, args in CASES.items():
        if opts.cases and "--full" not in args:
            row(name, [*command, *SIMULATE, *args], opts.runs)


if __name__ == "__main__":
    main()
