"""Hardware profiles: TOML round trip, one-line errors naming the bad field, application to a
cluster and to `simulate --profile`, and deterministic calibration from the same inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.calibrate.build import build_profile, write_profile, write_samples
from sim.cli.main import main
from topo import get_cluster
from topo.collective_fit import CollectiveFit, CollectiveFits
from topo.hardware_profile import FitInfo, HardwareProfile, dump_profile_toml, load_profile

ROOT = Path(__file__).resolve().parents[2]


def _profile() -> HardwareProfile:
    return HardwareProfile(
        meta={"name": "t"}, device={"gemm_efficiency": 0.7, "gemm_curve_flops": [1e6, 1e9],
                                    "gemm_curve_efficiency": [0.3, 0.7], "host_overhead_s": 1e-4},
        host={"cpu_cores": 2}, links={"pcie": {"latency_s": 2e-5}},
        collectives=(CollectiveFit(op="all_reduce", link="shm", algorithm="gloo", ranks=2, alpha_s=1e-4,
                                   busbw_GBps=1.0),),
        fits={"device.gemm_efficiency": FitInfo(samples=12, rel_error=0.05, source="GEMM sweep")})


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(dump_profile_toml(_profile(), "header line"))
    assert load_profile(path) == _profile()
    assert path.read_text().startswith("# header line")


@pytest.mark.parametrize("text, field", [
    ("[device]\ngemm_eficiency = 0.5\n", "device.gemm_eficiency"),
    ("[device]\ngemm_efficiency = 1.5\n", "gemm_efficiency"),
    ("[host]\ncpu_cores = 0\n", "cpu_cores"),
    ("[links.wifi]\nlatency_s = 1.0\n", "links.wifi"),
    ("[[collectives]]\nop = \"all_reduce\"\nlink = \"shm\"\nalpha_s = 1.0\nbusbw_GBps = -1.0\n", "busbw_GBps"),
    ("[devices]\nx = 1\n", "devices"),
])
def test_bad_field_is_a_one_line_error_naming_it(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        profile = load_profile(path)
        profile.apply(get_cluster("cpu-host"))
    message = str(err.value)
    assert field in message and "\n" not in message


def test_simulate_profile_bad_field_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[device]\nkernel_overhead = 1e-6\n")
    code = main(["simulate", "--model", "tiny", "--cluster", "cpu-host", "--tp", "1", "--pp", "1", "--profile", str(path),
                 "--json"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "device.kernel_overhead" in err and len(err.splitlines()) == 1


def test_profile_applies_to_the_cluster() -> None:
    cluster = _profile().apply(get_cluster("cpu-host"))
    assert cluster.device.gemm_efficiency == 0.7 and cluster.device.host_overhead_s == 1e-4
    assert cluster.host.cpu_cores == 2 and cluster.pcie.latency_s == 2e-5


def test_simulate_uses_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "small", "--cluster", "cpu-host", "--gpus-per-node", "2", "--tp", "1", "--pp", "2",
            "--global-batch", "4", "--json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)["step_time_s"]
    path = tmp_path / "slow.toml"
    path.write_text("[device]\ngemm_efficiency = 0.05\n")
    assert main([*args, "--profile", str(path)]) == 0
    slow = json.loads(capsys.readouterr().out)["step_time_s"]
    assert slow > 2 * base


def test_fitted_collectives_price_by_group_size() -> None:
    fits = CollectiveFits([CollectiveFit(op="all_reduce", link="shm", ranks=2, alpha_s=1.0, busbw_GBps=1.0),
                           CollectiveFit(op="all_reduce", link="shm", ranks=8, alpha_s=3.0, busbw_GBps=1.0)])
    assert fits.time_s("all_reduce", "shm", 0.0, 2) == 0.0
    assert fits.time_s("all_reduce", "shm", 1e9, 2) == pytest.approx(1.0 + 1.0)
    assert fits.time_s("all_reduce", "shm", 1e9, 8) == pytest.approx(3.0 + 2 * 7 / 8)
    assert fits.time_s("all_reduce", "shm", 1e9, 4) == pytest.approx(1.0 + 1.5)  # nearest size: 2
    assert fits.time_s("all_gather", "shm", 1e9, 2) is None


def _samples() -> dict:
    gemm = [{"bench": "gemm", "m": m, "k": 256, "n": 256, "flops": 2.0 * m * 256 * 256,
             "seconds": 2.0 * m * 256 * 256 / (40e9 + 1e8 * m)} for m in (64, 128, 256, 512)]
    coll = [{"bench": "collective", "op": "all_reduce", "ranks": 2, "bytes": s, "backend": "gloo",
             "seconds": 1e-4 + s / 1e9} for s in (4096, 1 << 20)]
    ew = [{"bench": "elementwise", "numel": n, "bytes": 12.0 * n, "seconds": 3e-6 + 12.0 * n / 3e10}
          for n in (4096, 65536)]
    return {"host": {"cpu_count": 2, "device": "cpu", "backend": "gloo", "torch": "x", "probe_s": [0.004, 0.004]},
            "samples": [*coll, *gemm, *ew]}


@pytest.mark.slow
def test_calibrating_twice_gives_the_same_profile(tmp_path: Path) -> None:
    run = ROOT / "traces" / "calib-ws1-small"
    if not (run / "manifest.json").is_file():
        pytest.skip("calibration run not recorded")
    samples = write_samples(_samples(), tmp_path / "s.json")
    outs = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.toml"
        assert main(["calibrate", "--samples", str(samples), str(run), "--out", str(out), "--name", "p",
                     "--json"]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    profile = load_profile(tmp_path / "a.toml")
    assert profile.fits["device.kernel_overhead_s"].samples > 0
    assert profile.device["peak_fp32_flops"] == pytest.approx(91.2e9, rel=1e-3)


def test_build_profile_without_runs_is_microbench_only(tmp_path: Path) -> None:
    profile = build_profile(name="m", bench=_samples())
    assert profile.host == {"cpu_cores": 2}
    assert [f.op for f in profile.collectives] == ["all_reduce"]
    assert "kernel_overhead_s" in profile.device
    write_profile(profile, tmp_path / "m.toml")
    assert load_profile(tmp_path / "m.toml") == profile


def test_calibrate_needs_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--out", "/tmp/never.toml"]) == 2
    assert "nothing to calibrate" in capsys.readouterr().err


def test_a_run_given_twice_is_refused_before_fitting(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = Path(__file__).resolve().parents[2] / "traces" / "calib-dp2-tiny"
    out = tmp_path / "p.toml"
    for twice in ([str(run), str(run)], [str(run), f"{run.parent}/../traces/calib-dp2-tiny/"]):
        assert main(["calibrate", *twice, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "run given twice" in err and "count double" in err, err
    assert not out.exists()
