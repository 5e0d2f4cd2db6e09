"""Re-run the commands the documentation shows and compare (or replace) the output pasted under them.

A command block (three backticks and ``sh``) followed directly by a plain block is a command and
its printed output. This tool runs each such command, in page order, in one scratch directory per
page that sees the repository's ``traces/``, ``profiles/``, ``docs/``, ``bench/`` and ``tests/``
(so a page's later commands find what its earlier ones wrote), and compares the output with the
pasted one. A line
``...`` in a pasted block stands for any number of lines; lines around it must match in order.

    python tools/docs_commands.py docs/journeys/*.md            # report every block that differs
    python tools/docs_commands.py --write docs/journeys/*.md    # paste today's output instead

A page opts a block out with ``<!-- docs-commands: skip -->`` on the line before it (a fresh
recording's timings differ run to run). With ``--write`` a block holding ``...`` keeps its shape:
the same number of lines before the first ``...`` and after the last one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("traces", "profiles", "docs", "bench", "tests")
BLOCK = re.compile(r"(?P<skip><!-- docs-commands: skip -->\n)?```sh\n(?P<cmd>.*?)\n```\n```\n(?P<out>.*?)\n```",
                   re.DOTALL)
ELLIPSIS = "..."
WIDTH = "240"  # what trainsim's tables use when stdout is not a terminal


@dataclass(frozen=True, kw_only=True)
class Block:
    """One command and the output pasted under it, with where that output sits in the page."""

    command: str
    pasted: str
    start: int
    end: int
    skip: bool


def blocks(text: str) -> list[Block]:
    return [Block(command=m["cmd"].replace("\\\n", " "), pasted=m["out"], start=m.start("out"),
                  end=m.end("out"), skip=bool(m["skip"])) for m in BLOCK.finditer(text)]


def groups(pasted: str) -> list[list[str]]:
    """The pasted lines split at each ``...`` line (one group when there is none)."""
    out: list[list[str]] = [[]]
    for line in pasted.split("\n"):
        if line == ELLIPSIS:
            out.append([])
        else:
            out[-1].append(line)
    return out


def matches(pasted: str, actual: str) -> bool:
    """Whether ``actual`` has the pasted lines in order, each ``...`` standing for any lines."""
    parts, lines = groups(pasted), actual.split("\n")
    if len(parts) == 1:
        return parts[0] == lines
    head, tail = parts[0], parts[-1]
    if lines[:len(head)] != head or lines[len(lines) - len(tail):] != tail:
        return False
    i, stop = len(head), len(lines) - len(tail)
    for part in parts[1:-1]:
        i = _find(lines[:stop], part, i)
        if i < 0:
            return False
        i += len(part)
    return True


def _find(lines: list[str], part: list[str], start: int) -> int:
    for i in range(start, len(lines) - len(part) + 1):
        if lines[i:i + len(part)] == part:
            return i
    return -1


def reshaped(pasted: str, actual: str) -> str | None:
    """Today's output in the pasted block's shape (head and tail kept around one ``...``); None
    when the block picks lines out of the middle, which only a person can choose again."""
    parts = groups(pasted)
    if len(parts) == 1:
        return actual
    if len(parts) > 2:
        return None
    head, tail, lines = len(parts[0]), len(parts[-1]), actual.split("\n")
    return "\n".join(lines[:head] + [ELLIPSIS] + (lines[len(lines) - tail:] if tail else []))


def run(command: str, cwd: Path) -> str:
    env = dict(os.environ, COLUMNS=WIDTH, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    return (done.stdout + done.stderr).rstrip("\n")


def scratch() -> Path:
    work = Path(tempfile.mkdtemp(prefix="docs-commands-"))
    for name in SHARED:
        (work / name).symlink_to(ROOT / name)
    return work


def check_page(page: Path, write: bool) -> list[str]:
    """Run the page's commands; return a line per differing block (and rewrite them with ``write``)."""
    text, work, problems, out = page.read_text(), scratch(), [], []
    last = 0
    for b in blocks(text):
        if b.skip:
            continue
        actual = run(b.command, work)
        if matches(b.pasted, actual):
            continue
        fresh = reshaped(b.pasted, actual)
        problems.append(f"{page}: `{b.command[:80]}` printed other output"
                        + (" (update by hand: the block picks lines)" if fresh is None else ""))
        if fresh is not None:
            out += [text[last:b.start], fresh]
            last = b.end
    if write and problems:
        page.write_text("".join(out) + text[last:])
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help="paste today's output where it differs")
    args = parser.parse_args(argv)
    problems = [p for page in args.pages for p in check_page(page, args.write)]
    print("\n".join(problems) if problems else f"{len(args.pages)} page(s): every shown output is current")
    return 1 if problems and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
