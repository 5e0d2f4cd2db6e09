"""``calibrate --samples FILE`` with a damaged file: one line naming the file, exit 2 (issue 16:
a corrupt samples file gave a raw codec error)."""

import pytest

from sim.cli.main import main


@pytest.mark.parametrize(("content", "needle"), [
    (b'{"bad', "cannot read microbenchmark samples"),
    (b"\xff\xfe\x00", "cannot read microbenchmark samples"),
    (b"[1, 2]", "not a samples file"),
    (b'{"samples": 3}', "list of objects"),
    (b'{"samples": [{"kind": "gemm"}]}', "malformed microbenchmark samples"),
])
def test_damaged_samples_file_is_one_line(tmp_path, capsys, content, needle):
    path = tmp_path / "x.samples.json"
    path.write_bytes(content)
    assert main(["calibrate", "--samples", str(path), "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and needle in err
    assert not (tmp_path / "p.toml").exists()
