"""Benchmark: trainsim against an analytical peer, the same configurations timed the same way.

The peer is llm-analysis (PyPI ``llm-analysis``, an analytical estimator of training latency and
memory: closed forms per layer, no timeline). It is not a trainsim dependency: install it in any
Python (``python -m venv /tmp/peer && /tmp/peer/bin/pip install llm-analysis``) and pass that
interpreter with ``--peer-python``. Each case is one configuration of Narayanan et al. 2021's
Table 1 models (GPT-3 shapes, A100 80GB, micro-batch 1, sequence 2048, full recompute, sequence
parallelism on, as the peer's ``sp_size`` defaults to TP), on the parallel plan of trainsim's
other benches; the peer gets the same model shape (a JSON written from trainsim's preset), GPU,
TP/PP/DP, micro-batch and global batch (it has no interleaving: the 530B row runs plain PP there).

Columns, CPU time (``time.process_time``; the machine is shared, so not wall time), median of N:
in-process (one configuration priced again in a warm process: trainsim's folded
``sim.simulate.simulate`` with its Timeline, the peer's ``llm_analysis.analysis.train``) and as a
whole process (``trainsim simulate --json --no-report``; ``python -c`` calling the peer's
``train``, which imports ``transformers`` as its package does), each after one unmeasured run that
writes the bytecode caches (PYTHONDONTWRITEBYTECODE is dropped from the children's environment, as
bench/startup_speed.py does: pip compiles an installed package's modules once, the peer's included).
Their predictions are not compared here (see ``trainsim validate --published``).

    python bench/peer_speed.py --peer-python /tmp/peer/bin/python
    python bench/peer_speed.py --peer-python /tmp/peer/bin/python -n 5 --case 18b
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from schedules.model_presets import model_presets
from sim.cli.job_args import job_from_args
from sim.cli.main import build_parser
from sim.list_passes import numba_available
from sim.simulate import simulate

# name -> (trainsim model, GPUs, tp, pp, dp, global batch, extra trainsim flags)
CASES: dict[str, tuple[str, int, int, int, int, int, list[str]]] = {
    "gpt3-1.7b / 32 A100 (TP1 PP1 DP32, gb 512)": ("gpt3-1.7b", 32, 1, 1, 32, 512, []),
    "gpt3-18b / 256 A100 (TP8 PP1 DP32, gb 1024)": ("gpt3-18b", 256, 8, 1, 32, 1024, []),
    "gpt3-145b / 1536 A100 (TP8 PP8 DP24, gb 2304)": ("gpt3-145b", 1536, 8, 8, 24, 2304, []),
    "gpt3-530b / 2240 A100 (TP8 PP35 DP8, gb 8960; trainsim vpp 3)": (
        "gpt3-530b", 2240, 8, 35, 8, 8960, ["--schedule", "interleaved", "--vpp", "3"]),
    "gpt3-1t / 3072 A100 (TP8 PP64 DP6, gb 3072)": ("gpt3-1t", 3072, 8, 64, 6, 3072, []),
}
PEER_CALL = """
import json, sys, time
from llm_analysis.analysis import train
kw = json.loads(sys.argv[1]); runs = int(sys.argv[2])
train(**kw)
cpu = []
for _ in range(runs):
    t0 = time.process_time(); train(**kw); cpu.append(time.process_time() - t0)
print(json.dumps(sorted(cpu)[len(cpu) // 2]))
"""


def trainsim_flags(case: tuple[str, int, int, int, int, int, list[str]]) -> list[str]:
    model, gpus, tp, pp, dp, batch, extra = case
    return ["--model", model, "--cluster", "dgx-a100", "--nodes", str(gpus // 8), "--tp", str(tp), "--pp", str(pp),
            "--dp", str(dp), "--global-batch", str(batch), "--microbatch-size", "1", "--recompute", "full",
            "--sequence-parallel", *extra]


def peer_kwargs(case: tuple[str, int, int, int, int, int, list[str]], model_dir: str) -> dict[str, object]:
    """The peer's ``train`` arguments for the same configuration (its model config written to ``model_dir``)."""
    model, gpus, tp, pp, dp, batch, _ = case
    spec = model_presets()[model]
    path = os.path.join(model_dir, f"{model}.json")
    with open(path, "w") as f:
        json.dump({"name": model, "max_seq_len": spec.seq_len, "num_layers": spec.num_layers, "n_head": spec.num_heads,
                   "hidden_dim": spec.hidden_size, "vocab_size": spec.vocab_size,
                   "ffn_embed_dim": spec.ffn_hidden_size}, f)
    return {"model_name": path, "gpu_name": "a100-sxm-80gb", "total_num_gpus": gpus, "tp_size": tp, "pp_size": pp,
            "dp_size": dp, "batch_size_per_gpu": 1, "global_batch_size": batch, "seq_len": spec.seq_len,
            "activation_recomputation": 2, "flash_attn": False, "log_level": "ERROR",
            "total_num_tokens": batch * spec.seq_len}


def process_cpu(argv: list[str]) -> float:
    """CPU seconds (user + system) of one child process running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_of(runs: int, measure: Callable[[], float]) -> float:
    """The median of ``runs`` calls of ``measure`` (seconds), after one unmeasured call (caches, imports)."""
    measure()
    return statistics.median(measure() for _ in range(runs))


def trainsim_in_process(flags: list[str], runs: int) -> float:
    job = job_from_args(build_parser(["simulate"]).parse_args(["simulate", *flags]))

    def once() -> float:
        t0 = time.process_time()
        simulate(job)
        return time.process_time() - t0
    return median_of(runs, once)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", help="a Python with llm-analysis installed (omit: trainsim columns only)")
    parser.add_argument("-n", "--runs", type=int, default=3, help="measured runs per cell (default 3)")
    parser.add_argument("--case", default="", help="only the cases whose name holds this text")
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the children cache their bytecode (module doc)
    trainsim = shutil.which("trainsim") or "trainsim"
    kernel = "numba kernel available" if numba_available() else "no numba: the reference pass"
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; CPU seconds, "
          f"median of {args.runs}; trainsim's list engine: {kernel}")
    print("| configuration | trainsim in-process | peer in-process | trainsim process | peer process |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as model_dir:
        for name, case in CASES.items():
            if args.case not in name:
                continue
            flags = trainsim_flags(case)
            ours = trainsim_in_process(flags, args.runs)
            our_process = median_of(args.runs, lambda f=flags: process_cpu([trainsim, "simulate", *f, "--json", "--no-report"]))
            theirs = their_process = float("nan")
            if args.peer_python:
                kw = json.dumps(peer_kwargs(case, model_dir))
                out = subprocess.run([args.peer_python, "-c", PEER_CALL, kw, str(args.runs)], check=True,
                                     capture_output=True, text=True).stdout
                theirs = float(out.strip().splitlines()[-1])
                call = f"from llm_analysis.analysis import train; import json; train(**json.loads({kw!r}))"
                their_process = median_of(args.runs, lambda c=call: process_cpu([args.peer_python, "-c", c]))
            print(f"| {name} | {ours * 1e3:.1f} ms | {theirs * 1e3:.2f} ms | {our_process:.2f} s | {their_process:.2f} s |",
                  flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
