"""A run's manifest.json, hand-edited or foreign: one line naming the file and the key, exit 2.

Every committed recording's manifest passes the check and its config round-trips through
``TrainConfig.from_dict``; each damaged key below was an internal error (a TypeError, a
KeyError, or an int() message naming no key) in analyze, validate or replay before
``profiler.run_manifest`` checked what they read.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from profiler.run_manifest import check_manifest, load_manifest
from profiler.trainer.config import TrainConfig
from profiler.validate.record import run_reference_s
from sim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "traces" / "pp2-zbv"  # per-rank traces + manifest: analyze, validate and replay read it

Damage = Callable[[dict[str, Any]], None]
DAMAGES: dict[str, tuple[Damage, str]] = {
    "model not a table": (lambda m: m["config"].__setitem__("model", 3.0), "config.model=3.0"),
    "unknown model key": (lambda m: m["config"]["model"].__setitem__("bogus", 1), "config.model.bogus is not a ModelSpec field"),
    "model key missing": (lambda m: m["config"]["model"].pop("num_layers"), "config.model.num_layers is missing"),
    "model flag as 1": (lambda m: m["config"]["model"].__setitem__("causal", 1), "config.model.causal=1"),
    "moe unknown key": (lambda m: m["config"]["model"].__setitem__("moe", {"x": 1}), "config.model.moe.x is not a MoESpec field"),
    "tp a text": (lambda m: m["config"].__setitem__("tp", "x"), "config.tp='x'"),
    "unknown schedule": (lambda m: m["config"].__setitem__("schedule", "zz"), "config.schedule='zz'"),
    "batch null": (lambda m: m["config"].__setitem__("global_batch", None), "config.global_batch=None"),
    "lr a text": (lambda m: m["config"].__setitem__("lr", "x"), "config.lr='x'"),
    "unknown config key": (lambda m: m["config"].__setitem__("tpp", 2), "unknown config key 'tpp'"),
    "derived key disagrees": (lambda m: m["config"].__setitem__("num_microbatches", 99), "config.num_microbatches=99"),
    "config a text": (lambda m: m.__setitem__("config", "s"), "config='s'"),
    "world size a text": (lambda m: m.__setitem__("world_size", "a"), "world_size='a'"),
    "world size disagrees": (lambda m: m.__setitem__("world_size", 7), "world_size=7"),
    "step times a text": (lambda m: m.__setitem__("step_times_s", "abc"), "step_times_s='abc'"),
    "a step time negative": (lambda m: m.__setitem__("step_times_s", [0.1, -1]), "step_times_s[1]=-1"),
    "per-rank times ragged": (lambda m: m.__setitem__("step_times_s_by_rank", [[0.1], "x"]), "step_times_s_by_rank[1]"),
    "profiled step a text": (lambda m: m.__setitem__("profiled_steps", [1, "x"]), "profiled_steps[1]='x'"),
    "device type a number": (lambda m: m.__setitem__("device_type", 5), "device_type=5"),
    "cpu count zero": (lambda m: m.__setitem__("cpu_count", 0), "cpu_count=0"),
    "not an object": (lambda m: m.clear(), ""),
}


def _as_stored(new: Any, stored: Any) -> Any:
    """``new`` with only the keys ``stored`` has, at every depth."""
    if isinstance(stored, dict) and isinstance(new, dict):
        return {k: _as_stored(new[k], v) for k, v in stored.items()}
    return new


def _manifest() -> dict[str, Any]:
    return json.loads((RUN / "manifest.json").read_text())


@pytest.mark.parametrize("path", sorted(str(p.relative_to(REPO)) for p in (REPO / "traces").rglob("manifest.json")))
def test_every_committed_manifest_passes_and_its_config_round_trips(path: str) -> None:
    manifest = json.loads((REPO / path).read_text())
    check_manifest(manifest)
    config = TrainConfig.from_dict(manifest["config"])
    again = json.loads(json.dumps(config.to_dict()))
    stored = manifest["config"]
    assert _as_stored(again, stored) == stored  # older runs lack fields added since


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_a_damaged_key_is_one_line_naming_it(name: str) -> None:
    damage, named = DAMAGES[name]
    manifest = _manifest()
    damage(manifest)
    if name == "not an object":
        with pytest.raises(ValueError, match="expected a JSON object"):
            check_manifest([])
        return
    with pytest.raises(ValueError) as err:
        check_manifest(manifest)
    text = str(err.value)
    assert "\n" not in text and named in text, text


@pytest.mark.parametrize("command", ["analyze", "validate", "replay"])
def test_the_commands_reading_a_manifest_exit_2_with_its_path(command: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    manifest = _manifest()
    manifest["config"]["model"]["bogus"] = 1
    (run / "manifest.json").write_text(json.dumps(manifest))
    args = [command, str(run), "--json"] + (["--no-profile"] if command == "validate" else [])
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{run / 'manifest.json'}: config.model.bogus is not a ModelSpec field" in err, err


def test_no_manifest_is_none_and_invalid_json_names_the_file(tmp_path: Path) -> None:
    assert load_manifest(tmp_path) is None
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match="manifest.json: invalid JSON"):
        load_manifest(tmp_path)


def test_a_profiled_step_beyond_the_step_times_is_named() -> None:
    manifest = _manifest()
    manifest["profiled_steps"] = [2, len(manifest["step_times_s"])]
    with pytest.raises(ValueError, match=r"profiled_steps\[1\]=\d+ is invalid: expected a step of step_times_s"):
        check_manifest(manifest)


@pytest.mark.parametrize("text,named", [("{", "invalid JSON"), ("[1]", "expected a JSON object"),
                                        ('{"reference": {"step_s": "abc"}}', "reference.step_s='abc' is invalid"),
                                        ('{"reference": {"step_s": -1}}', "reference.step_s=-1 is invalid")])
def test_a_damaged_recording_json_is_one_line_naming_the_file(tmp_path: Path, text: str, named: str) -> None:
    (tmp_path / "recording.json").write_text(text)
    with pytest.raises(ValueError) as err:
        run_reference_s(tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path / "recording.json") in str(err.value) and named in str(err.value)
    (tmp_path / "recording.json").write_text('{"reference": {"step_s": 0.25}}')
    assert run_reference_s(tmp_path) == 0.25
