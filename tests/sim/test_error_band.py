"""The error band: Student t quantiles against the tables, the prediction interval's closed form,
the tiers of comparable runs, leave-one-source-out, coverage counting, the residual file's round
trip, and (slow) that the shipped residual table describes the shipped model."""

from __future__ import annotations

import math
import statistics

import pytest

from sim.accuracy.band import CONFIDENCE, MIN_ROWS, error_band, t_quantile
from sim.accuracy.coverage import coverage_by, held_out
from sim.accuracy.job_class import JobClass
from sim.accuracy.residuals import RESIDUALS_FILE, Residual, parse_residuals, residuals_json

H100_FSDP = JobClass(precision="bf16", generation="hopper", parallelism="fsdp", gpus=64, runtime="torch")


def _res(name: str, source: str, ratio: float, job: JobClass = H100_FSDP) -> Residual:
    """A run whose measured step is ``ratio`` x its simulated 1 s."""
    return Residual(name=name, source=source, job=job, measured_s=ratio, sim_s=1.0)


@pytest.mark.parametrize(("dof", "table"), [(4, 1.533), (5, 1.476), (9, 1.383), (15, 1.341), (29, 1.311)])
def test_t_quantile_matches_the_tables(dof: int, table: float) -> None:
    """t(0.9, dof) from any Student t table (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2)."""
    assert t_quantile(0.9, dof) == pytest.approx(table, abs=2e-3)


def test_band_is_the_t_prediction_interval_of_the_log_ratios() -> None:
    ratios = [1.0, 1.1, 1.2, 0.95, 1.05, 1.15]
    rows = [_res(f"r{i}", f"s{i % 3}", x) for i, x in enumerate(ratios)]
    band = error_band(H100_FSDP, rows)
    assert band is not None and band.comparable and band.confidence == CONFIDENCE
    q = [math.log(x) for x in ratios]
    half = t_quantile(0.9, 5) * statistics.stdev(q) * math.sqrt(1 + 1 / 6)
    assert band.low == pytest.approx(math.exp(statistics.fmean(q) - half))
    assert band.high == pytest.approx(math.exp(statistics.fmean(q) + half))
    assert band.runs == tuple(f"r{i}" for i in range(6)) and band.sources == ("s0", "s1", "s2")


def test_a_model_that_leans_fast_gets_a_band_above_its_estimate() -> None:
    rows = [_res(f"r{i}", f"s{i % 2}", 1.2 + 0.01 * i) for i in range(6)]
    band = error_band(H100_FSDP, rows)
    assert band is not None and band.low > 1.0


def test_the_closest_tier_with_enough_runs_is_used() -> None:
    """Runs of another parallelism class are not used while the job's own class has enough; fewer
    than MIN_ROWS of it fall back to a looser tier, and one that is not comparable says so."""
    own = [_res(f"own{i}", f"s{i % 2}", 1.0 + 0.02 * i) for i in range(MIN_ROWS)]
    pipeline = JobClass(precision="bf16", generation="hopper", parallelism="pipeline", gpus=64, runtime="megatron")
    other = [_res(f"pp{i}", f"s{i % 2}", 2.0, pipeline) for i in range(MIN_ROWS)]
    band = error_band(H100_FSDP, own + other)
    assert band is not None and set(band.runs) == {r.name for r in own} and band.comparable
    short = error_band(H100_FSDP, own[:MIN_ROWS - 1] + other)
    assert short is not None and not short.comparable and set(short.runs) == {r.name for r in own[:-1] + other}


def test_one_source_is_not_enough_and_a_left_out_source_is_left_out() -> None:
    one_source = [_res(f"r{i}", "only", 1.0 + 0.01 * i) for i in range(8)]
    assert error_band(H100_FSDP, one_source) is None
    two = one_source + [_res("x", "other", 1.3), _res("y", "other", 1.25)]
    band = error_band(H100_FSDP, two, exclude_source="other")
    assert band is None
    assert error_band(H100_FSDP, two) is not None


def test_coverage_counts_runs_inside_their_left_out_band() -> None:
    """Three sources of tight runs around 1.0 and one far run: the tight ones are inside the band
    the others give them, the far one is not."""
    rows = [_res(f"{s}{i}", s, 1.0 + 0.01 * i) for s in ("a", "b", "c") for i in range(3)]
    rows.append(_res("far", "d", 3.0))
    held = held_out(rows)
    by_source = {c.group: c for c in coverage_by(held, lambda r: r.source)}
    assert by_source["d"].covered == 0 and by_source["d"].runs == 1
    assert by_source["all"].runs == 10 and by_source["all"].covered >= 6


def test_residual_table_round_trips() -> None:
    rows = [_res("a", "s", 1.25), _res("b", "t", 0.75)]
    assert parse_residuals(residuals_json(rows, ["f.toml"])) == tuple(rows)


@pytest.mark.slow
def test_the_shipped_residual_table_describes_the_shipped_model() -> None:
    """Re-simulating every calibration file gives the committed sim/accuracy/residuals.json byte for
    byte (after any change to the model, run trainsim validate --published all --update-band)."""
    from profiler.validate.published.band_rows import residuals_of
    from profiler.validate.published.rows import CALIBRATION_FILES, REPO, read_rows
    from profiler.validate.published.run import validate_rows

    residuals = [r for path in CALIBRATION_FILES for r in residuals_of(validate_rows(read_rows(path)))]
    files = [str(p.relative_to(REPO)) for p in CALIBRATION_FILES]
    assert residuals_json(residuals, files) == RESIDUALS_FILE.read_text()
