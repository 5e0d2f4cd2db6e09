"""Read a file of published, measured training runs into typed rows.

The format (``docs/published-runs-format.toml`` documents every key): one ``[[run]]`` table per
run. Keys a source leaves unstated are absent; keys the format does not use (``published``, ...)
are ignored (``notes`` is kept: a few framework settings are stated only there); text keys are kept as written. Units: seconds, tokens/s per GPU,
GiB, MFU as a fraction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from core.errors import invalid
from topo.toml_file import load_toml

REPO = Path(__file__).resolve().parents[3]
DENSE_FILE = REPO / "docs" / "published-runs.toml"
FP8_FILE = REPO / "docs" / "published-fp8-runs.toml"
MOE_FILE = REPO / "docs" / "published-moe-runs.toml"
CALIBRATION_FILES = (DENSE_FILE, FP8_FILE, MOE_FILE)
"""The calibration files kept in the repository: dense BF16 runs, FP8/BF16 twins, MoE runs (sources
and derivations: docs/published-runs-sources.md and each row's ``source``)."""
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


_INTS = {"gpus", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "tp", "pp", "cp",
         "dp", "vpp", "microbatch_size", "grad_accum", "global_batch", "ep", "etp",
         "pipeline_runs"}
_POSITIVE = {"gpu_memory_gb", "measured_step_s", "measured_tokens_per_s_per_gpu", "measured_mfu",
             "measured_peak_memory_gib", "measured_fp8_speedup"}
_BOOLS = {"sequence_parallel", "ratio_only"}
_MEMORY_KINDS = ("allocated", "reserved")


def read_rows(path: str | Path) -> list[PublishedRow]:
    """The runs of a published-runs file; a bad file or row is a one-line ValueError naming the
    path, the run and the field."""
    return load_toml(path, _rows)


def _rows(data: dict[str, Any]) -> list[PublishedRow]:
    runs = data.get("run")
    if not isinstance(runs, list) or not runs:
        raise invalid("run", runs, "expected one or more [[run]] tables")
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
    label = f"run {index + 1} ({raw.get('name', 'unnamed')})"
    known = {f.name for f in fields(PublishedRow)}
    values = {k: v for k, v in raw.items() if k in known}
    try:
        for key in REQUIRED:
            if key not in values:
                raise invalid(key, None, "a required key is missing")
        for key, value in values.items():
            _check(key, value)
        return PublishedRow(**values)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None


def _check(key: str, value: Any) -> None:
    """Raise unless ``value`` has the type the format gives ``key``."""
    if key in _INTS and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise invalid(key, value, "expected an integer >= 1")
    if key == "zero" and value not in (0, 1, 2, 3):
        raise invalid(key, value, "expected one of 0, 1, 2, 3")
    if key in _POSITIVE and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        raise invalid(key, value, "expected a number > 0")
    if key in _BOOLS and not isinstance(value, bool):
        raise invalid(key, value, "expected true or false")
    if key == "peak_memory_kind" and value not in _MEMORY_KINDS:
        raise invalid(key, value, "expected one of " + ", ".join(_MEMORY_KINDS))
    if key == "global_batch_tokens" and not isinstance(value, int | str):
        raise invalid(key, value, "expected an integer or a text")
    if key not in _INTS | _POSITIVE | _BOOLS | {"zero", "global_batch_tokens"} \
            and not isinstance(value, str):
        raise invalid(key, value, "expected a text")


def default_file() -> Path:
    """The dense calibration file of the repository (``docs/published-runs.toml``)."""
    return DENSE_FILE
