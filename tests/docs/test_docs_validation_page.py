"""The documentation's validation page is generated from ``trainsim validate --published all --json``.

Fast: the generator renders a small saved output (``validation-fixture.json``: three dense rows,
one of them skipped, four FP8 rows with two twin pairs, a few coverage groups; the file summaries
are the full files') into tables that carry its numbers. Slow: the committed ``docs/validation.md``
equals what the generator makes of the command's output today, so the page cannot drift.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.docs_validation import PAGE, command_json, main, render

FIXTURE = Path(__file__).with_name("validation-fixture.json")


@pytest.fixture(scope="module")
def fixture_page() -> str:
    return render(json.loads(FIXTURE.read_text()))


def test_run_rows_carry_the_commands_numbers(fixture_page):
    assert ("| `torchtitan-a100x64-llama3-8b-fsdp-sacop` | 64 | 2.756 | 2.537 | -7.9% | 2973 | 3229 | "
            "0.552 | 0.599 | 0.582 | yes | network |  |") in fixture_page
    assert "| `llmfoundry-h100x8-mpt3b-s8192-fp8` | 8 |" in fixture_page


def test_skipped_rows_give_their_reason(fixture_page):
    assert "- skipped `opt-175b-a100-80gbx992-fsdp-tp8`: no measured step time" in fixture_page


def test_coverage_tables_per_view(fixture_page):
    for title in ("By source", "By precision:", "By parallelism class:", "By GPU generation:"):
        assert title in fixture_page
    assert "| llm-foundry | 8 | 8 | 100.0% | 8 |" in fixture_page
    assert fixture_page.count("| all | 58 | 43 | 74.1% | 30 |") == 4


def test_families_memory_and_pairs(fixture_page):
    assert "| torchtitan-a100 | 5 | -7.1% | 7.1% | -9.4% … -4.8% |" in fixture_page
    assert "| `torchtitan-h100x8-llama31-8b-fsdp` | reserved | 82.4 | 78.4 | -4.9% | 72.9 |" in fixture_page
    assert ("| `llmfoundry-h100x8-mpt3b-s8192-bf16` | `llmfoundry-h100x8-mpt3b-s8192-fp8` | 1.155 | 1.182 | "
            "+0.027 | stated |") in fixture_page
    assert "| `ibm-float8-t3-llama3-405b-bf16` | `ibm-float8-t3-llama3-405b-fp8` | 1.43 |" in fixture_page


def test_every_run_appears_and_output_is_deterministic(fixture_page):
    data = json.loads(FIXTURE.read_text())
    for f in data["files"]:
        for r in f["runs"]:
            assert f"`{r['name']}`" in fixture_page
    assert render(json.loads(FIXTURE.read_text())) == fixture_page


def test_check_mode_reports_a_stale_page(tmp_path, capsys):
    page = tmp_path / "validation.md"
    assert main(["--json", str(FIXTURE), "--out", str(page)]) == 0
    assert main(["--json", str(FIXTURE), "--out", str(page), "--check"]) == 0
    page.write_text(page.read_text().replace("-7.9%", "-7.8%"))
    assert main(["--json", str(FIXTURE), "--out", str(page), "--check"]) == 1
    assert "out of date" in capsys.readouterr().out


@pytest.mark.slow
def test_committed_page_is_current():
    """Regenerate with ``python tools/docs_validation.py`` when the model or a calibration file changes."""
    assert PAGE.read_text() == render(command_json())
