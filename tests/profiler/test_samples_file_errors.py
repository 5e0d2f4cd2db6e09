"""``calibrate --samples FILE`` with a damaged file: one line naming the file, exit 2 (issue 16:
a corrupt samples file gave a raw codec error)."""

import pytest

from sim.cli.main import main


@pytest.mark.parametrize(("content", "needle"), [
    (b'{"bad', "cannot read microbenchmark samples"),
    (b"\xff\xfe\x00", "cannot read microbenchmark samples"),
    (b"[1, 2]", "not a samples file"),
    (b'{"samples": 3}', "list of objects"),
    (b'{"samples": [{"kind": "gemm"}]}', "samples[0].bench=None is invalid: expected one of gemm"),
    (b'{"samples": [{"bench": "gemm", "m": 64, "n": 64, "k": 64, "flops": 5e5}]}', "samples[0].seconds is missing"),
    (b'{"samples": [{"bench": "gemm", "m": 64, "n": 64, "k": 64, "flops": 5e5, "seconds": 0}]}',
     "samples[0].seconds=0 is invalid: expected a finite number > 0"),  # was a ZeroDivisionError in the fit
    (b'{"samples": [{"bench": ["gemm"]}]}', "samples[0].bench=['gemm'] is invalid"),  # was a TypeError
    (b'{"samples": [{"bench": "memory_streams", "processes": 2, "rates": [1e9, Infinity]}]}', "samples[0].rates=[1000000000.0, inf]"),
    (b'{"samples": [{"bench": "memory_streams", "processes": 2, "rates": [1e9, 1e31]}]}',
     "samples[0].rates=[1000000000.0, 1e+31] is invalid"),
    (b'{"samples": [], "host": {"cpu_count": 0}}', "host.cpu_count=0 is invalid"),
])
def test_damaged_samples_file_is_one_line(tmp_path, capsys, content, needle):
    path = tmp_path / "x.samples.json"
    path.write_bytes(content)
    assert main(["calibrate", "--samples", str(path), "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and needle in err
    assert not (tmp_path / "p.toml").exists()
