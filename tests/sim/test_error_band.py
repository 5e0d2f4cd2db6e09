"""The error band: Student t quantiles against the tables, the prediction interval's closed form
(random effects across sources; the plain t interval with one run per source), its coverage of a
new source's runs on clustered synthetic data, the tiers of comparable runs, leave-one-source-out,
coverage counting, the residual file's round trip, and (slow) that the shipped residual table
describes the shipped model."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from sim.accuracy.band import CONFIDENCE, MIN_ROWS, error_band, new_source_spread, t_quantile
from sim.accuracy.coverage import coverage_by, held_out
from sim.accuracy.job_class import JobClass
from sim.accuracy.residuals import RESIDUALS_FILE, Residual, parse_residuals, residuals_json

H100_FSDP = JobClass(precision="bf16", generation="hopper", parallelism="fsdp", gpus=64, runtime="torch")


def _res(name: str, source: str, ratio: float, job: JobClass = H100_FSDP) -> Residual:
    """A run whose measured step is ``ratio`` x its simulated 1 s."""
    return Residual(name=name, source=source, job=job, measured_s=ratio, sim_s=1.0)


@pytest.mark.parametrize(("p", "dof", "table"), [
    (0.9, 1, 3.078), (0.9, 2, 1.886), (0.9, 3, 1.638), (0.9, 4, 1.533), (0.9, 5, 1.476), (0.9, 9, 1.383),
    (0.9, 15, 1.341), (0.9, 29, 1.311), (0.9, 100, 1.290), (0.975, 5, 2.571), (0.995, 10, 3.169), (0.95, 1, 6.314)])
def test_t_quantile_matches_the_tables(p: float, dof: int, table: float) -> None:
    """t(p, dof) from any Student t table (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2), and its
    symmetry."""
    assert t_quantile(p, dof) == pytest.approx(table, abs=1e-3)
    assert t_quantile(1 - p, dof) == pytest.approx(-table, abs=1e-3)


def test_band_is_the_random_effects_prediction_interval_of_a_new_source() -> None:
    """Three sources of two runs: centre = mean of source means, sd^2 = between + within + the
    centre's variance, t with sources - 1 degrees of freedom (the closed form by hand)."""
    ratios = [1.0, 1.1, 1.2, 0.95, 1.05, 1.15]
    rows = [_res(f"r{i}", f"s{i % 3}", x) for i, x in enumerate(ratios)]
    band = error_band(H100_FSDP, rows)
    assert band is not None and band.comparable and band.confidence == CONFIDENCE
    groups = [[math.log(ratios[i]), math.log(ratios[i + 3])] for i in range(3)]
    means = [sum(g) / 2 for g in groups]
    within = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g) / (6 - 3)
    spread = statistics.variance(means)
    between = max(0.0, spread - within / 2)
    half = t_quantile(0.9, 2) * math.sqrt(between + within + spread / 3)
    centre = statistics.fmean(means)
    assert band.low == pytest.approx(math.exp(centre - half))
    assert band.high == pytest.approx(math.exp(centre + half))
    assert band.runs == tuple(f"r{i}" for i in range(6)) and band.sources == ("s0", "s1", "s2")


def test_one_run_per_source_gives_the_plain_t_prediction_interval() -> None:
    ratios = [1.0, 1.1, 1.2, 0.95, 1.05, 1.15]
    band = error_band(H100_FSDP, [_res(f"r{i}", f"s{i}", x) for i, x in enumerate(ratios)])
    q = [math.log(x) for x in ratios]
    half = t_quantile(0.9, 5) * statistics.stdev(q) * math.sqrt(1 + 1 / 6)
    assert band is not None
    assert band.low == pytest.approx(math.exp(statistics.fmean(q) - half))
    assert band.high == pytest.approx(math.exp(statistics.fmean(q) + half))


@pytest.mark.parametrize(("sources", "between", "within"), [(6, 0.08, 0.03), (4, 0.06, 0.04), (10, 0.05, 0.05)])
def test_band_covers_a_new_sources_run_at_its_confidence(sources: int, between: float, within: float) -> None:
    """Clustered synthetic residuals (a source effect ~ N(0, between) shared by its 1-8 runs, run
    noise ~ N(0, within)): the band holds a new source's run about 80% of the time (seeded, 4,000
    draws; slightly above, as its degrees of freedom are the few sources), where treating the
    runs as independent (the t interval of all of them) holds it clearly less often."""
    rng = random.Random(7)
    inside = pooled_inside = 0
    draws = 4000
    for _ in range(draws):
        groups = []
        for _ in range(sources):
            effect = rng.gauss(0, between)
            groups.append([effect + rng.gauss(0, within) for _ in range(rng.randint(1, 8))])
        new = rng.gauss(0, between) + rng.gauss(0, within)
        centre, sd, dof = new_source_spread(groups)
        inside += abs(new - centre) <= t_quantile(0.9, dof) * sd
        q = [x for g in groups for x in g]
        pooled_half = t_quantile(0.9, len(q) - 1) * statistics.stdev(q) * math.sqrt(1 + 1 / len(q))
        pooled_inside += abs(new - statistics.fmean(q)) <= pooled_half
    assert 0.78 <= inside / draws <= 0.87
    assert pooled_inside / draws <= inside / draws - 0.04


def test_a_model_that_leans_fast_gets_a_band_above_its_estimate() -> None:
    rows = [_res(f"r{i}", f"s{i % 3}", 1.2 + 0.01 * i) for i in range(6)]
    band = error_band(H100_FSDP, rows)
    assert band is not None and band.low > 1.0


def test_the_closest_tier_with_enough_runs_is_used() -> None:
    """Runs of another parallelism class are not used while the job's own class has enough; fewer
    than MIN_ROWS of it fall back to a looser tier, and one that is not comparable says so."""
    own = [_res(f"own{i}", f"s{i % 3}", 1.0 + 0.02 * i) for i in range(MIN_ROWS)]
    pipeline = JobClass(precision="bf16", generation="hopper", parallelism="pipeline", gpus=64, runtime="megatron")
    other = [_res(f"pp{i}", f"s{i % 3}", 2.0, pipeline) for i in range(MIN_ROWS)]
    band = error_band(H100_FSDP, own + other)
    assert band is not None and set(band.runs) == {r.name for r in own} and band.comparable
    short = error_band(H100_FSDP, own[:MIN_ROWS - 1] + other)
    assert short is not None and not short.comparable and set(short.runs) == {r.name for r in own[:-1] + other}


def test_two_sources_are_not_enough_and_a_left_out_source_is_left_out() -> None:
    """A band needs MIN_SOURCES (3) sources: its degrees of freedom are the sources less one."""
    one_source = [_res(f"r{i}", "only", 1.0 + 0.01 * i) for i in range(8)]
    assert error_band(H100_FSDP, one_source) is None
    two = one_source + [_res("x", "other", 1.3), _res("y", "other", 1.25)]
    assert error_band(H100_FSDP, two) is None
    three = two + [_res("z", "third", 1.1)]
    assert error_band(H100_FSDP, three, exclude_source="third") is None
    band = error_band(H100_FSDP, three)
    assert band is not None and band.sources == ("only", "other", "third")


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
