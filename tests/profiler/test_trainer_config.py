"""Trainer run configuration, flags and launch command (torch-free)."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import replace

import pytest

from profiler.launch import launch_command, torchrun_argv
from profiler.trainer.args import add_train_arguments, config_from_args, config_to_argv
from profiler.trainer.config import SCHEDULES, TrainConfig
from schedules.model import ModelSpec
from schedules.model_presets import get_model

TINY = get_model("tiny")


def parse(*flags: str) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return config_from_args(parser.parse_args(list(flags)))


def test_loop_placement_matches_interleaved_megatron_order() -> None:
    config = TrainConfig(model=TINY, pp=2, vpp=2, schedule="interleaved", global_batch=4)
    assert config.rank_stages(0) == [0, 2]
    assert config.rank_stages(1) == [1, 3]


def test_v_placement_puts_first_and_last_stage_on_rank_zero() -> None:
    config = TrainConfig(model=TINY, pp=2, vpp=2, schedule="zbv", global_batch=4)
    assert config.rank_stages(0) == [0, 3]
    assert config.rank_stages(1) == [1, 2]


def test_stage_layer_ranges_partition_the_layers_in_order() -> None:
    config = TrainConfig(model=TINY, pp=2, vpp=2, schedule="interleaved", global_batch=4)
    ranges = config.stage_layer_ranges()
    assert [list(r) for r in ranges] == [[0], [1], [2], [3]]
    single = TrainConfig(model=TINY, pp=2, schedule="1f1b", global_batch=4)
    assert [list(r) for r in single.stage_layer_ranges()] == [[0, 1], [2, 3]]


def test_num_microbatches_is_global_over_dp_times_microbatch() -> None:
    config = TrainConfig(model=TINY, dp=2, pp=2, microbatch_size=2, global_batch=16)
    assert config.num_microbatches == 4
    assert config.world_size == 4


@pytest.mark.parametrize(("fields", "field"), [
    ({"schedule": "looped"}, "schedule"),
    ({"zero": 4}, "zero"),
    ({"tp": 3}, "tp"),  # 4 heads
    ({"pp": 2, "schedule": "interleaved", "vpp": 1, "global_batch": 4}, "vpp"),
    ({"pp": 2, "schedule": "zbv", "vpp": 3, "global_batch": 6}, "vpp"),
    ({"pp": 1, "schedule": "interleaved", "vpp": 2}, "schedule"),
    ({"dp": 2, "global_batch": 3}, "global_batch"),
    ({"pp": 2, "schedule": "1f1b", "global_batch": 1}, "global_batch"),
    ({"pp": 2, "dp": 2, "schedule": "zb-h1", "zero": 3, "global_batch": 4}, "zero"),
    ({"slow_rank": 2}, "slow_rank"),
    ({"slow_rank": 0, "slow_factor": 0.5}, "slow_factor"),
    ({"recompute": "selective"}, "recompute"),
    ({"warmup_steps": -1}, "warmup_steps"),
])
def test_bad_config_names_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}="):
        TrainConfig(model=TINY, **fields)  # type: ignore[arg-type]


def test_tied_embeddings_need_a_single_stage() -> None:
    tied = get_model("nanogpt-124m")
    with pytest.raises(ValueError, match="^pp="):
        TrainConfig(model=tied, pp=2, global_batch=4)


def test_kv_heads_must_split_over_tp() -> None:
    with pytest.raises(ValueError, match="num_kv_heads"):
        TrainConfig(model=TINY, tp=4)  # tiny has 2 KV heads


def test_every_schedule_maps_to_a_pipelining_class_name() -> None:
    for info in SCHEDULES.values():
        assert info.torch_class.startswith("Schedule")


def test_flag_defaults_follow_the_schedule() -> None:
    config = parse("--pp", "2", "--schedule", "interleaved")
    assert config.vpp == 2
    assert config.global_batch == 4  # dp * microbatch * 2 * pp
    assert parse("--pp", "2", "--schedule", "dualpipev").vpp == 2
    assert parse().global_batch == 2


def test_slow_rank_flag() -> None:
    config = parse("--dp", "2", "--slow-rank", "1:2.5")
    assert (config.slow_rank, config.slow_factor) == (1, 2.5)
    with pytest.raises(ValueError, match="slow-rank"):
        parse("--slow-rank", "fast")


def test_seq_len_override() -> None:
    assert parse("--seq-len", "16").model == replace(TINY, seq_len=16)


@pytest.mark.parametrize("config", [
    TrainConfig(model=TINY, tp=2, pp=2, dp=2, vpp=2, schedule="interleaved", zero=1,
                global_batch=8, steps=6, warmup_steps=1, slow_rank=3, slow_factor=2.0),
    TrainConfig(model=replace(TINY, seq_len=16), dp=4, zero=3, global_batch=8, lr=0.5,
                optimizer="sgd", recompute="full", fail_rank=1),
    TrainConfig(model=ModelSpec(name="mine", num_layers=2, hidden_size=32, num_heads=2,
                                vocab_size=64, seq_len=8, tied_embeddings=True)),
])
def test_config_round_trips_through_flags(config: TrainConfig) -> None:
    assert parse(*config_to_argv(config)) == config


def test_launch_command_has_cluster_placeholders_and_worker_flags() -> None:
    config = TrainConfig(model=TINY, tp=2, pp=2, dp=2, vpp=2, schedule="interleaved",
                         zero=1, global_batch=8)
    line = launch_command(config, "/data/run")
    for placeholder in ("--nnodes=$NNODES", "--node-rank=$NODE_RANK",
                        "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT", "--rdzv-backend=c10d"):
        assert placeholder in line
    worker = shlex.split(line)[shlex.split(line).index("profiler.trainer") + 1:]
    out_index = worker.index("--out")
    assert worker[out_index + 1] == "/data/run"
    assert parse(*worker[:out_index]) == config


def test_local_torchrun_is_standalone_with_one_process_per_rank(tmp_path: object) -> None:
    config = TrainConfig(model=TINY, tp=2, dp=2, global_batch=4)
    argv = torchrun_argv(config, tmp_path)  # type: ignore[arg-type]
    assert "--standalone" in argv
    assert "--nproc-per-node=4" in argv


@pytest.mark.parametrize("text,named", [('{"x": 1}', "model-json.x is not a ModelSpec field"),
                                        ("[1]", "model-json=[1] is invalid"),  # were TypeErrors
                                        ("{", "model-json='{' is invalid: expected a JSON object"),
                                        ('{"num_layers": 2}', "model-json.hidden_size is missing")])
def test_a_bad_model_json_is_one_line_naming_the_flag(text: str, named: str) -> None:
    with pytest.raises(ValueError) as err:
        parse("--model-json", text)
    assert "\n" not in str(err.value) and named in str(err.value)
