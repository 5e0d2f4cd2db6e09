#!/usr/bin/env bash
# Writes the outputs that refactors must keep byte-identical into DIR, using the trainsim tree at
# SRC (PYTHONPATH; python -P so the current directory does not shadow it), e.g. a clean `git worktree add /tmp/base-X <commit>` and this worktree, then diff -r.
# usage: bench/byte_outputs.sh SRC DIR [quick]
set -uo pipefail
SRC=$(cd "$1" && pwd); OUT=$2; QUICK=${3:-}
rm -rf "$OUT"; mkdir -p "$OUT"; cd "$(dirname "$0")/.."   # ../shared relative paths
run() { local name=$1; shift; PYTHONPATH="$SRC" python -P -m sim.cli.main "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo "rc=$?" >>"$OUT/$name.out"; }
run sim-default simulate --json --no-report
run sim-torch simulate --json --no-report --runtime torch
run sim-torch-z3 simulate --json --no-report --runtime torch --zero 3 --tp 2 --pp 2
run sim-ds simulate --json --no-report --framework deepspeed --zero 3 --tp 1 --pp 1 --model llama3-8b
run sim-fsdp simulate --json --no-report --framework torchtitan --zero 3 --tp 1 --pp 2 --schedule interleaved --vpp 2
run sim-offload simulate --json --no-report --offload optimizer --offload-device nvme --zero 2 --recompute selective
run sim-fp8 simulate --json --no-report --dtype fp8 --sequence-parallel --tp-comm-overlap
run sim-flow simulate --json --no-report --fidelity flow --full --steps 2 --chrome-trace "$OUT/trace-flow.json"
run sim-zb simulate --json --no-report --schedule zb-h1 --offload-activations --chrome-trace "$OUT/trace-zb.json"
run sim-moe simulate --json --no-report --model deepseek-v3 --cluster dgx-b200 --nodes 32 --tp 1 --pp 8 --dp 32 --ep 8 --zero 1 --recompute full --global-batch 1024 --uneven-stages --schedule dualpipev --vpp 2
run sim-moe-torch simulate --json --no-report --model mixtral-8x7b --nodes 4 --tp 2 --pp 2 --ep 4 --etp 1 --runtime torch --zero 3 --moe-dispatcher deepep --chrome-trace "$OUT/trace-moe.json"
run sim-moe-ovl simulate --json --no-report --model qwen3-30b-a3b --nodes 2 --tp 1 --pp 2 --ep 8 --moe-overlap on --moe-imbalance 1.3 --recompute selective --selective-recompute layernorm-moe-act
run sim-hsdp simulate --json --no-report --runtime torch --zero 3 --tp 2 --pp 1 --dp-replicate 2 --full
run sim-ds2021 simulate --json --no-report --framework deepspeed-2021 --zero 3 --tp 1 --pp 1 --model llama3-8b
run sim-m2021 simulate --json --no-report --framework megatron-2021 --pp 4 --tp 2
run sim-m2023 simulate --json --no-report --framework megatron-2023 --pp 2 --tp 2 --loss-nan-check --no-loss-allreduce
run sim-badflag simulate --json --no-report --tp four
run compare compare --json --no-report
run schedule schedule --json
run val-runs validate --published ../shared/published-runs/runs.toml --json
run val-fp8 validate --published ../shared/published-runs/fp8-runs.toml --json
run val-moe validate --published docs/published-moe-runs.toml --json
if [ -z "$QUICK" ]; then
  run suite validate --suite --json
  run suite-moe validate --suite --moe --json
  run explore explore --model llama3-70b --cluster dgx-h100:512,dgx-a100:1024 --out "$OUT/sweep" --no-report --workers 1 --json
  run explore-moe explore --model qwen3-235b-a22b --cluster dgx-h100:256,dgx-b200:128 --out "$OUT/sweep-moe" --no-report --workers 1 --json
fi
# wall-clock and output-directory fields differ between any two runs
for f in "$OUT"/explore*.out; do [ -f "$f" ] && sed -i -E "s#$OUT#OUT#g; s/\"wall_s\": [0-9.e+-]+/\"wall_s\": 0/" "$f"; done
exit 0
