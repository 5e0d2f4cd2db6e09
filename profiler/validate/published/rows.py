"""Read a file of published, measured training runs into typed rows.

The format (``docs/published-runs-format.toml`` documents every key): one ``[[run]]`` table per
run. Keys a source leaves unstated are absent; the documentation keys (:data:`DOCUMENTATION`:
``published``, ``model``, ...) are checked and not used; any other key is an error (``notes`` is
kept: a few framework settings are stated only there); text keys are kept as written. Every value
is checked by :data:`RULES` (the model and plan keys by a job file's rules). Units: seconds,
tokens/s per GPU, GiB, MFU as a fraction.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from core.errors import invalid
from core.settings import BOOLEAN, Rule, choice, integer
from sim.job_settings import SETTINGS
from topo.toml_file import load_toml

REPO = Path(__file__).resolve().parents[3]
DENSE_FILE = REPO / "docs" / "published-runs.toml"
FP8_FILE = REPO / "docs" / "published-fp8-runs.toml"
MOE_FILE = REPO / "docs" / "published-moe-runs.toml"
NEMO_FP8_FILE = REPO / "docs" / "published-nemo-fp8-runs.toml"
CALIBRATION_FILES = (DENSE_FILE, FP8_FILE, MOE_FILE, NEMO_FP8_FILE)
"""The calibration files kept in the repository: dense BF16 runs, FP8/BF16 twins, MoE runs, NeMo and
Megatron-Bridge FP8 runs on H100 (a check file: no constant is fitted to it) (sources and
derivations: docs/published-runs-sources.md and each row's ``source``)."""
FORMAT_FILE = REPO / "docs" / "published-runs-format.toml"
REQUIRED = ("name", "gpu", "gpus", "framework", "layers", "hidden", "heads", "seq_len", "tp", "pp", "dp", "zero")


@dataclass(frozen=True, kw_only=True)
class PublishedRow:
    """One published run as its source states it (None: not stated).

    Model: ``layers``, ``hidden``, ``heads``, ``kv_heads``, ``ffn_hidden``, ``ffn_kind``, ``vocab``,
    ``seq_len``. Plan: ``tp``, ``pp``, ``cp``, ``dp``, ``vpp``, ``zero``, ``zero_note``,
    ``sequence_parallel``, ``recompute``, ``compile``, ``offload``, ``microbatch_size``,
    ``grad_accum``, ``global_batch`` (sequences), ``global_batch_tokens``, ``dtype``,
    ``pipeline_runs`` (the pipeline schedule runs that many times per step, each over an equal
    share of the micro-batches: :class:`profiler.validate.published.jobs.RowJob`).
    Hardware: ``gpu`` (text), ``gpu_memory_gb``, ``gpus``, ``network`` (text). Measured:
    ``measured_step_s`` (s), ``measured_tokens_per_s_per_gpu``, ``measured_mfu`` (fraction, by the
    source's ``mfu_formula``), ``measured_peak_memory_gib`` (GiB) and ``peak_memory_kind``
    ("allocated" or "reserved", when the row says). ``notes``: the row's free-text notes. MoE: ``moe_model`` (a preset of
    :mod:`schedules.moe_presets`), ``ep``, ``etp`` (:mod:`profiler.validate.published.moe`).
    FP8/BF16 twins (``docs/published-fp8-runs.toml``): ``pair`` (the twin's name),
    ``measured_fp8_speedup`` (FP8 throughput / BF16 throughput of the pair) and ``ratio_only``
    (no step time is derivable: only the pair's ratio is compared, :mod:`profiler.validate.published.pairs`).
    """

    name: str
    source_group: str | None = None
    source: str | None = None
    framework: str
    gpu: str
    gpu_memory_gb: float | None = None
    gpus: int
    network: str | None = None
    dtype: str | None = None
    layers: int
    hidden: int
    heads: int
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    ffn_kind: str | None = None
    vocab: int | None = None
    seq_len: int
    tp: int
    pp: int
    cp: int = 1
    dp: int
    vpp: int | None = None
    zero: int
    zero_note: str | None = None
    sequence_parallel: bool | None = None
    recompute: str | None = None
    compile: str | None = None
    offload: str | None = None
    microbatch_size: int | None = None
    grad_accum: int | None = None
    global_batch: int | None = None
    global_batch_tokens: int | str | None = None
    measured_step_s: float | None = None
    step_basis: str | None = None
    step_derivation: str | None = None
    measured_tokens_per_s_per_gpu: float | None = None
    measured_mfu: float | None = None
    mfu_formula: str | None = None
    measured_peak_memory_gib: float | None = None
    peak_memory_kind: str | None = None
    notes: str | None = None
    moe_model: str | None = None
    ep: int | None = None
    etp: int | None = None
    pipeline_runs: int | None = None
    pair: str | None = None
    ratio_only: bool = False
    measured_fp8_speedup: float | None = None

    @property
    def family(self) -> str:
        """The row's group: its ``source_group``, else the framework's first word and the GPU."""
        if self.source_group:
            return self.source_group
        return f"{self.framework.split()[0].lower()}-{self.gpu.split()[0].lower()}"


def _positive(hi: float) -> Rule:
    """A finite int or float in (0, hi]."""
    def accepts(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= hi
    return Rule(f"expected a number in (0, {hi:g}]", accepts)


TEXT = Rule("expected a text", lambda v: isinstance(v, str))
TEXTS = Rule("expected a text or a list of texts",
             lambda v: isinstance(v, str) or isinstance(v, list) and all(isinstance(x, str) for x in v))
_SAME_AS_JOBS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "tp", "pp", "cp", "dp",
                 "vpp", "microbatch_size", "global_batch", "zero", "ep", "etp", "sequence_parallel")
RULES: Mapping[str, Rule] = {
    **{f.name: TEXT for f in fields(PublishedRow)},  # text unless said below
    **{key: SETTINGS[key].rule for key in _SAME_AS_JOBS},  # a job file's bounds (sim.job_settings)
    "gpus": integer(1, 1_000_000), "grad_accum": SETTINGS["microbatches"].rule,
    "pipeline_runs": SETTINGS["microbatches"].rule, "ratio_only": BOOLEAN,
    "global_batch_tokens": Rule("expected an integer in [1, 1e15] or a text", lambda v: isinstance(v, str) or (
        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 10**15)),
    "gpu_memory_gb": _positive(1e6), "measured_step_s": _positive(1e9), "measured_tokens_per_s_per_gpu": _positive(1e9),
    "measured_mfu": _positive(1.0), "measured_peak_memory_gib": _positive(1e6), "measured_fp8_speedup": _positive(1e3),
    "peak_memory_kind": choice(("allocated", "reserved")),
}
"""What each key of a row accepts: the model and plan keys a job file also has take its rules
(:data:`sim.job_settings.SETTINGS`: ``layers = 10**30`` is refused alike), numbers are finite."""
DOCUMENTATION: Mapping[str, Rule] = {
    "model": TEXT, "published": TEXT, "tokens_basis": TEXT, "speedup_derivation": TEXT, "recipe": TEXT,
    "ffn_kind_note": TEXT, "not_stated": TEXTS, "measured_hfu": _positive(10.0),
    "measured_tflops_per_gpu": _positive(1e6)}
"""Keys that document a row for its readers and are not used (``docs/published-runs-format.toml``:
the model's name, the source's own words, how a figure was derived, what the source leaves unstated,
the source's HFU and TFLOP/s). Any other key is an error naming the valid ones."""


def read_rows(path: str | Path) -> list[PublishedRow]:
    """The runs of a published-runs file; a bad file or row is a one-line ValueError naming the
    path, the run and the field."""
    return load_toml(path, _rows)


def _rows(data: dict[str, Any]) -> list[PublishedRow]:
    runs = data.get("run")
    if not isinstance(runs, list) or not runs:
        raise invalid("run", runs, "expected one or more [[run]] tables")
    unknown = sorted(set(data) - {"run"})
    if unknown:
        raise invalid(unknown[0], data[unknown[0]], "a published-runs file holds only [[run]] tables")
    rows = [_row(i, raw) for i, raw in enumerate(runs)]
    names = [r.name for r in rows]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise invalid("name", duplicates[0], "run names must be unique")
    return rows


def _row(index: int, raw: Any) -> PublishedRow:
    label = f"run {index + 1}"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{label}: expected a [[run]] table")
    name = raw.get("name")
    label = f"run {index + 1} ({name if isinstance(name, str) else 'unnamed'})"
    try:
        for key in REQUIRED:
            if key not in raw:
                raise invalid(key, None, "a required key is missing")
        for key, value in raw.items():
            _check(key, value)
        return PublishedRow(**{k: v for k, v in raw.items() if k in RULES})
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None


def _check(key: str, value: Any) -> None:
    """Raise unless ``key`` is a key of the format and ``value`` follows its rule."""
    rule = RULES.get(key) or DOCUMENTATION.get(key)
    if rule is None:
        close = difflib.get_close_matches(key, [*RULES, *DOCUMENTATION], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise invalid(key, value, f"unknown key; {hint}valid: {', '.join([*RULES, *DOCUMENTATION])}")
    if not rule.accepts(value):
        raise invalid(key, value, rule.what)


def default_file() -> Path:
    """The dense calibration file of the repository (``docs/published-runs.toml``)."""
    return DENSE_FILE
