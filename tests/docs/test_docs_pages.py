"""The README and the documentation site (docs/, mkdocs.yml) as a user meets them.

The README stays a short front page: at most 300 lines, its first two commands the ones CI runs
(.ci/run runs the second verbatim), links that resolve. User documentation never needs the
repository's neighbours (``../shared``) and never talks about the machine or the work sessions
that produced it. ``mkdocs build --strict`` (in .ci/run) checks the site's own links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
SESSION_TALK = re.compile(r"this VM|this round|previous round|earlier round|\.\./shared|(?<![\w#/])issue \d+",
                          re.IGNORECASE)


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", text, re.DOTALL)


def test_readme_is_a_short_front_page():
    assert len(README.read_text().splitlines()) <= 300


def test_readme_starts_with_the_two_commands_ci_runs():
    first, second = sh_blocks(README.read_text())[:2]
    assert first.endswith("pip install -q -e . && trainsim simulate")
    assert second.endswith("ruff check . && mypy && pytest")
    assert second in (ROOT / ".ci" / "run").read_text()


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text()):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_session_or_machine_talk(page):
    assert SESSION_TALK.findall(page.read_text()) == []


def test_every_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert str(page.relative_to(ROOT / "docs")) in nav, page


def test_flags_and_defaults_are_documented():
    page = (ROOT / "docs" / "commands" / "simulate.md").read_text()
    section = page.split("## Flags and defaults", 1)[1].split("\n## ", 1)[0]
    for needle in ("16 micro-batches", "--microbatches", "selective", "Size guard", "peak_memory_gib", "exit code 2"):
        assert needle in section, needle
