"""Write ``docs/validation.md`` from ``trainsim validate --published all --json``.

The validation page of the documentation site is generated, never edited by hand, so its tables
cannot drift from what the command prints: every number on it is read from the command's JSON
(the three calibration files ``docs/published-runs.toml``, ``docs/published-fp8-runs.toml`` and
``docs/published-moe-runs.toml``, and the error band's leave-one-source-out coverage).

    python tools/docs_validation.py                  # run the command (about 30 s CPU), write the page
    python tools/docs_validation.py --json FILE      # render a saved `validate --published all --json`
    python tools/docs_validation.py --check          # exit 1 when the committed page is not current

``tests/docs/test_docs_validation_page.py`` renders a small fixture (fast) and checks that the
committed page equals the command's output today (slow).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "validation.md"
COMMAND = "trainsim validate --published all --json"
BAND_VIEWS = (("source", "source (each source left out in turn)"), ("precision", "precision"),
              ("parallelism", "parallelism class"), ("generation", "GPU generation"))

Row = Sequence[str]


def table(header: Row, rows: Iterable[Row], right: Iterable[int] = ()) -> list[str]:
    """A Markdown table; columns whose index is in ``right`` are right-aligned."""
    aligned = set(right)
    rule = ["---:" if i in aligned else "---" for i in range(len(header))]
    lines = [header, rule, *rows]
    return ["| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines]


def pct(x: float | None, signed: bool = True) -> str:
    """A fraction as a percentage with one decimal (``+4.8%``); an em dash when absent."""
    if x is None:
        return "—"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def num(x: float | None, digits: int = 4) -> str:
    """A number to ``digits`` significant figures; an em dash when absent."""
    return "—" if x is None else f"{x:.{digits}g}"


def yes_no(x: bool | None) -> str:
    return "—" if x is None else ("yes" if x else "**no**")


def run_row(r: dict[str, Any]) -> Row:
    """One published run: measured and simulated step, tokens/s/GPU, MFU, fits, what was assumed."""
    return [f"`{r['name']}`", str(r["gpus"]), num(r["measured_step_s"]), num(r["sim_step_s"]),
            pct(r["step_err"]), num(r["measured_tokens_per_s_per_gpu"]), num(r["sim_tokens_per_s_per_gpu"]),
            num(r["measured_mfu"], 3), num(r["sim_mfu"], 3), num(r["published_mfu"], 3),
            yes_no(r["sim_fits_hbm"]), ", ".join(sorted(r["assumed"])), ", ".join(sorted(r["approx"]))]


RUN_HEADER = ["run", "GPUs", "measured s", "simulated s", "error", "tok/s/GPU", "sim tok/s/GPU",
              "MFU", "sim MFU", "published MFU", "fits", "assumed", "approx"]


def runs_section(f: dict[str, Any]) -> list[str]:
    simulated = [r for r in f["runs"] if not r["skipped"]]
    lines = table(RUN_HEADER, (run_row(r) for r in simulated), right=range(1, 10))
    skipped = [r for r in f["runs"] if r["skipped"]]
    return lines + [""] + [f"- skipped `{r['name']}`: {r['reason']}" for r in skipped]


def family_section(f: dict[str, Any]) -> list[str]:
    rows = ([name, str(s["rows"]), pct(s["mean_err"]), pct(s["mape"], signed=False),
             f"{pct(s['min_err'])} … {pct(s['max_err'])}"] for name, s in sorted(f["families"].items()))
    return table(["family", "rows", "mean error", "MAPE", "range"], rows, right=range(1, 5))


def memory_section(f: dict[str, Any]) -> list[str]:
    rows = [[f"`{r['name']}`", r["memory_kind"], num(r["measured_peak_memory_gib"], 3),
             num(r["sim_peak_memory_gib"], 3), pct(r["memory_err"]), num(r["sim_allocated_gib"], 3)]
            for r in f["runs"] if r["measured_peak_memory_gib"] is not None]
    if not rows:
        return []
    m = f["memory"]
    return (["Peak memory per GPU (GiB), in the kind the source measured:", ""]
            + table(["run", "measured kind", "measured", "simulated", "error", "simulated allocated"],
                    rows, right=range(2, 6))
            + ["", f"{m['rows']} rows: MAPE {pct(m['mape'], signed=False)}, mean {pct(m['mean_err'])}."])


def pairs_section(f: dict[str, Any]) -> list[str]:
    if not f["pairs"]:
        return []
    rows = ([f"`{p['bf16']}`", f"`{p['fp8']}`", num(p["measured_speedup"]), num(p["sim_speedup"]),
             f"{p['speedup_err']:+.3f}", "ratio only" if p["ratio_only"] else "stated"] for p in f["pairs"])
    s = f["pair_summary"]
    return (["FP8/BF16 twins compared by speedup (FP8 tokens/s over BF16 tokens/s):", ""]
            + table(["BF16 run", "FP8 run", "measured speedup", "simulated speedup", "error", "settings"],
                    rows, right=range(2, 5))
            + ["", f"{s['pairs']} pairs: |simulated − measured| median {s['median_abs_speedup_err']:.3f}, "
                   f"max {s['max_abs_speedup_err']:.3f}; the {s['stated_pairs']} with stated settings: median "
                   f"{s['stated_median_abs_speedup_err']:.3f}, max {s['stated_max_abs_speedup_err']:.3f}."])


def notes_section(f: dict[str, Any]) -> list[str]:
    notes = sorted({(kind, key, text) for r in f["runs"] for kind in ("assumed", "approx")
                    for key, text in r[kind].items()})
    return ["What the sources leave unstated (assumed) or the plan can only approximate (approx):", ""] + [
        f"- {kind} `{key}`: {text}" for kind, key, text in notes]


def file_summary(f: dict[str, Any]) -> str:
    worst = f["worst"]
    return (f"{f['expressed']}/{f['rows']} rows simulated, {f['skipped']} skipped; step-time MAPE "
            f"**{pct(f['mape'], signed=False)}**, mean signed {pct(f['mean_step_err'])}, worst "
            f"`{worst['name']}` {pct(worst['step_err'])}.")


def file_section(f: dict[str, Any]) -> list[str]:
    parts: list[Callable[[dict[str, Any]], list[str]]] = [
        family_section, runs_section, memory_section, pairs_section, notes_section]
    lines = [f"## `{f['file']}`", "", file_summary(f), ""]
    for part in parts:
        body = part(f)
        lines += body + [""] if body else []
    return lines


def band_section(coverage: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = ["## The error band's coverage", "",
             "Each run is left out with every run of its source, the band is rebuilt from the rest, and the "
             "run counts as covered when its measured step lies inside its 80% band "
             "([the error band](model/error-band.md)). \"Band from comparable runs\" counts the runs whose band "
             "rests on runs of the same precision and parallelism class (tiers 1-2 of `sim.accuracy.band.TIERS`); "
             "the others' bands come from a looser tier and say so.", ""]
    for key, title in BAND_VIEWS:
        rows = ([g["group"], str(g["runs"]), str(g["covered"]), pct(g["coverage"], signed=False),
                 str(g["comparable"])] for g in coverage[key])
        lines += [f"By {title}:", ""] + table(
            ["group", "runs", "inside the 80% band", "coverage", "band from comparable runs"],
            rows, right=range(1, 5)) + [""]
    return lines


def overview(files: Sequence[dict[str, Any]]) -> list[str]:
    rows = ([f"`{f['file']}`", f"{f['expressed']}/{f['rows']}", pct(f["mape"], signed=False),
             pct(f["mean_step_err"]), f"`{f['worst']['name']}` {pct(f['worst']['step_err'])}"] for f in files)
    return table(["file", "simulated", "step-time MAPE", "mean signed error", "worst row"], rows,
                 right=(2, 3)) + [""]


def render(data: dict[str, Any]) -> str:
    """The whole page for one ``validate --published all --json`` object (deterministic)."""
    files = data["files"]
    lines = ["# Validation against published runs", "",
             "<!-- Generated by `python tools/docs_validation.py` from "
             f"`{COMMAND}`; do not edit by hand. -->", "",
             f"Every number on this page comes from `{COMMAND}` (about 30 s, no GPU, no PyTorch) and is "
             "regenerated with `python tools/docs_validation.py`; a test fails when the page and the "
             "command disagree. `err` = (simulated − measured) / measured. How each file's rows are "
             "chosen and what is known about the misses: [published runs](validation/published-runs.md); "
             "sources per row: [published-runs-sources.md](published-runs-sources.md).", ""]
    lines += overview(files) + band_section(data["band_coverage"])
    for f in files:
        lines += file_section(f)
    definitions = files[0]["definitions"] if files else {}
    lines += ["## Definitions", ""] + [f"- `{k}`: {v}" for k, v in sorted(definitions.items())]
    return "\n".join(lines).rstrip() + "\n"


def command_json() -> dict[str, Any]:
    """Run ``trainsim validate --published all --json`` in this process and parse what it prints."""
    from sim.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["validate", "--published", "all", "--json"])
    if code not in (0, 1):  # 1: a row outside its target, still a complete report
        raise SystemExit(f"{COMMAND} exited {code}")
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help=f"a saved `{COMMAND}` output instead of running it")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is not current")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write (default: docs/validation.md)")
    args = parser.parse_args(argv)
    data = json.loads(args.json.read_text()) if args.json else command_json()
    page = render(data)
    if args.check:
        current = args.out.exists() and args.out.read_text() == page
        print(f"{args.out}: {'current' if current else 'out of date: run python tools/docs_validation.py'}")
        return 0 if current else 1
    args.out.write_text(page)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
