"""Output flags of the profiler's commands follow the one file-writing rule (sim.atomic): a FIFO,
a device node, a socket or a directory where a file goes (a file where a directory goes), and a
missing parent directory, are refused in one line (exit 2) before any work and left untouched.
Also: a recording's trace export is checked whole before it replaces anything, and a launch
promotes ``--out`` only when every rank's trace parses. No torch needed unless said."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from test_kineto_cpu import gloo_rank

from profiler.launch_traces import trace_problem
from sim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "traces" / "tp2pp2dp2-interleaved"
SPECIAL_NODES = ("fifo", "chardev", "socket", "directory")  # the root conftest's special_node makes them
MISSING_RUN = "no-such-run"  # a run that would fail to load: the output must be refused first

FILE_FLAGS = [["analyze", MISSING_RUN, "--report"], ["analyze", MISSING_RUN, "--chrome-trace"],
              ["replay", MISSING_RUN, "--report"], ["critical-path", MISSING_RUN, "--report"],
              ["validate", MISSING_RUN, "--report"], ["validate", "--published", "no-such.toml", "--report"],
              ["calibrate", MISSING_RUN, "--out"]]
DIRECTORY_FLAGS = [["profile", "--dp", "2", "--device", "cpu", "--out"]]


@pytest.mark.parametrize("argv", FILE_FLAGS + DIRECTORY_FLAGS, ids=lambda a: f"{a[0]}-{a[-1]}-{a[1]}")
@pytest.mark.parametrize("kind", [*SPECIAL_NODES, "missing-parent"])
def test_every_profiler_output_flag_refuses_special_files_and_missing_directories(
        refuses_output, argv, kind):
    if argv[0] == "calibrate":  # it checks its run directories first: give it one
        argv = ["calibrate", str(RUN), "--out"]
    refuses_output(argv, kind, argv in DIRECTORY_FLAGS)


@pytest.mark.parametrize("kind", [*SPECIAL_NODES[:-1], "missing-parent"])  # a directory is the usual root
def test_recording_the_suite_checks_its_traces_root_before_recording(refuses_output, monkeypatch, kind):
    """Was: ``validate --calibration --record --traces PATH`` recorded for minutes, then wrote below
    PATH, making missing parents on the way (or failing on a FIFO)."""
    import profiler.commands.validate as validate

    monkeypatch.setattr(validate, "record_run", lambda *a, **k: pytest.fail("recording started"))
    refuses_output(["validate", "--calibration", "--record", "--runs", "ws1-tiny", "--traces"], kind, True)


def test_calibrate_checks_its_samples_file_too(tmp_path, capsys, special_node):
    pytest.importorskip("torch")
    untouched = special_node("fifo", tmp_path / "p.samples.json")
    assert main(["calibrate", "--microbench", "--out", str(tmp_path / "p.toml")]) == 2
    assert "--out's samples file=" in capsys.readouterr().err and untouched()


def gz(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data))
    return path


def test_a_recording_is_whole_only_when_every_rank_trace_parses_with_events(tmp_path):
    text = json.dumps(gloo_rank(0).doc()).encode()  # a small Kineto-shaped CPU trace (27 events)
    good = gz(tmp_path / "rank0.json.gz", text).read_bytes()
    (tmp_path / "rank1.json.gz").write_bytes(good)
    assert trace_problem(tmp_path, 2) is None
    assert trace_problem(tmp_path, 3) == "rank 2 wrote no trace (rank2.json.gz)"
    gz(tmp_path / "rank1.json.gz", b"")  # what torch's export left under ulimit -f: 20-49 bytes
    assert trace_problem(tmp_path, 2).startswith("rank 1's trace rank1.json.gz does not parse")
    gz(tmp_path / "rank1.json.gz", text[:len(text) // 2])  # cut off
    assert trace_problem(tmp_path, 2).startswith("rank 1's trace rank1.json.gz does not parse")
    gz(tmp_path / "rank1.json.gz", json.dumps({"traceEvents": []}).encode())
    assert trace_problem(tmp_path, 2) == "rank 1's trace rank1.json.gz holds no events"


class FakeProfile:
    """Stands for torch.profiler.profile: its export writes ``text`` as Kineto would (plain JSON, no errors)."""

    def __init__(self, text: bytes) -> None:
        self.text = text

    def export_chrome_trace(self, path: str) -> None:
        Path(path).write_bytes(self.text)


def test_a_cut_off_export_never_replaces_a_trace(tmp_path):
    pytest.importorskip("torch")
    from profiler.trainer.recording import export_trace

    target = tmp_path / "rank0.json.gz"
    target.write_bytes(b"previous")
    for cut in (b"", b'{"traceEvents": [{"ph": "X"}, {"ph"'):
        with pytest.raises(OSError, match="stopped short .*the previous file is unchanged"):
            export_trace(FakeProfile(cut), target)
        assert target.read_bytes() == b"previous" and sorted(os.listdir(tmp_path)) == ["rank0.json.gz"]
    whole = b'{"traceEvents": [{"ph": "X", "name": "a"}]}\n'
    export_trace(FakeProfile(whole), target)
    assert gzip.decompress(target.read_bytes()) == whole and sorted(os.listdir(tmp_path)) == ["rank0.json.gz"]
