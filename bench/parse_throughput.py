"""Parse throughput and peak memory of ``profiler.kineto.load_run`` on a ~1 GB synthetic run.

The run is made by repeating a real one (default: rank 0 of the committed recording
traces/dp4-zero3, so no ../shared is needed): every rank's events are written ``reps`` times, each repetition
shifted in time by the trace's length, with correlation ids, flow ids and ProfilerStep numbers
renumbered, so the result is one long, valid run. The parse then happens in a fresh subprocess,
which reports its wall and CPU time and its peak RSS (``getrusage`` maxrss); this script also
samples the RSS of that subprocess's whole tree (parser worker processes included).

    python bench/parse_throughput.py                    # one ~1 GB file, plain JSON
    python bench/parse_throughput.py --gzip             # the same, gzipped
    python bench/parse_throughput.py --target-mb 256 --workers 1
    python bench/parse_throughput.py --source ../shared/traces-external/dlrm-8rank-v100 --ranks 8
    python bench/parse_throughput.py --reproducers      # the damaged-trace reproducers of issue 15

Throughput is MB (10^6 bytes) of uncompressed JSON per second of ``load_run``. The acceptance
line checks issue 15's bound: peak RSS of the whole process tree within 2x the JSON size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO, Any

import orjson

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO / "traces" / "dp4-zero3"

CHILD = """
import json, resource, sys, time
from profiler.kineto import load_run
from profiler.hta_metrics import per_rank_breakdown
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t, c = time.perf_counter(), cpu()
workers = None if sys.argv[2] == "auto" else int(sys.argv[2])
run = load_run(sys.argv[1], workers=workers)
parse_s, cpu_s = time.perf_counter() - t, cpu() - c
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
per_rank_breakdown(run)
print(json.dumps({"parse_s": parse_s, "cpu_s": cpu_s, "breakdown_s": time.perf_counter() - t, "spans": len(run.timeline),
                  "ranks": len(run.timeline.meta["ranks"]), "rss_before_mb": base / 1024,
                  "rss_peak_mb": peak / 1024}))
"""


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _shifted(events: list[dict[str, Any]], k: int, dt: float, dcorr: int) -> list[bytes]:
    """One repetition of the events: time + k*dt, correlation/flow ids + k*dcorr, step + k."""
    out = []
    for e in events:
        e = dict(e)
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + k * dt
        if isinstance(e.get("id"), int):
            e["id"] = e["id"] + k * dcorr
        args = e.get("args")
        if isinstance(args, dict) and isinstance(args.get("correlation"), int):
            e["args"] = {**args, "correlation": args["correlation"] + k * dcorr}
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name[13:]) + k}"
        out.append(orjson.dumps(e))
    return out


def _write_rank(doc: dict[str, Any], reps: int, fh: IO[bytes]) -> int:
    """Write a repeated copy of one rank's trace; returns its uncompressed size."""
    events = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") == "X" and e.get("cat") != "Trace"]
    t0 = min(e["ts"] for e in timed)
    dt = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000
    dcorr = 1 + max([e["args"]["correlation"] for e in events if isinstance(e.get("args"), dict)
                     and isinstance(e["args"].get("correlation"), int)] + [0])
    head = orjson.dumps({k: v for k, v in doc.items() if k != "traceEvents"})
    size = fh.write(head[:-1] + b', "traceEvents": [\n')
    sep = b""
    for k in range(-1, reps):
        chunk = [orjson.dumps(m) for m in meta] if k < 0 else _shifted(events, k, dt, dcorr)
        size += fh.write(sep + b",\n".join(chunk))
        sep = b",\n"
    return size + fh.write(b"\n]}\n")


def synthesize(source: Path, out_dir: Path, target_mb: float, gz: bool,
               ranks: int | None = None) -> tuple[int, int]:
    """Write the repeated run into ``out_dir``; returns (uncompressed bytes, repetitions)."""
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz"))
                   and p.name != "manifest.json")[:ranks]
    docs = [_load(p) for p in files]
    one = sum(len(orjson.dumps(d)) for d in docs)
    reps = max(1, math.ceil(target_mb * 1e6 / one))
    total = 0
    for i, doc in enumerate(docs):
        path = out_dir / (f"rank{i}.json" + (".gz" if gz else ""))
        fh: Any = gzip.open(path, "wb", compresslevel=1) if gz else path.open("wb")
        with fh:
            total += _write_rank(doc, reps, fh)
    return total, reps


def _tree_rss_bytes(root: int) -> int:
    """Resident memory of process ``root`` and all its descendants (Linux /proc)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier and p not in tree]
        tree.update(kids)
        frontier = kids
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in tree:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def run_child(tmp: Path, workers: str) -> tuple[dict[str, Any], int]:
    """Parse in a fresh process; its JSON report and the peak RSS of its process tree (bytes)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp), workers], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"parse failed:\n{err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1]), peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="directory of a real run")
    ap.add_argument("--target-mb", type=float, default=1024.0, help="uncompressed size of the run")
    ap.add_argument("--gzip", action="store_true", help="write .json.gz files")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic run")
    ap.add_argument("--workers", default="auto", help="parser processes (default: load_run's choice)")
    ap.add_argument("--ranks", type=int, default=1, help="use only the first N ranks of the source "
                    "(default 1: one big file)")
    ap.add_argument("--reproducers", action="store_true",
                    help="time the damaged-trace reproducers instead (NaN, gzip bomb, 1 GiB whitespace)")
    args = ap.parse_args()
    if args.reproducers:
        return reproducers()
    if not args.source.is_dir():
        print(f"source run not found: {args.source}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="trainsim-bench-"))
    try:
        size, reps = synthesize(args.source, tmp, args.target_mb, args.gzip, args.ranks)
        on_disk = sum(p.stat().st_size for p in tmp.iterdir())
        r, tree_peak = run_child(tmp, args.workers)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    mb = size / 1e6
    print(f"run: {r['ranks']} rank(s) x {reps} repetitions of {args.source.name}, "
          f"workers={args.workers}; "
          f"{mb:.0f} MB uncompressed JSON ({on_disk / 1e6:.0f} MB on disk{', gzip' if args.gzip else ''})")
    print(f"parse: {r['parse_s']:.1f} s wall -> {mb / r['parse_s']:.1f} MB/s; "
          f"{r['cpu_s']:.1f} s CPU in the parsing process -> {mb / r['cpu_s']:.1f} MB/s per CPU-second "
          f"(excludes worker processes); {r['spans']} spans; breakdown {r['breakdown_s']:.2f} s")
    print(f"peak RSS of the parsing process: {r['rss_peak_mb']:.0f} MB (imports alone "
          f"{r['rss_before_mb']:.0f} MB); of its whole process tree incl. workers (sampled every "
          f"50 ms): {tree_peak / 2**20:.0f} MB = {tree_peak / size:.2f} x the uncompressed size")
    ok = tree_peak <= 2 * size
    print(f"acceptance (issue 15: peak memory within 2x the trace size): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


CLI_CHILD = """
import resource, sys, time
from sim.cli.main import main
t = time.perf_counter()
code = main(sys.argv[1:])
print(f"@@ {code} {time.perf_counter() - t:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}",
      file=sys.stderr)
"""


def _cli(*argv: str) -> tuple[int, float, float, str]:
    """Run ``trainsim argv`` in a fresh process: (exit code, seconds, peak RSS MB, error line)."""
    proc = subprocess.run([sys.executable, "-c", CLI_CHILD, *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=900, check=False)
    lines = proc.stderr.strip().splitlines()
    tail = [ln for ln in lines if ln.startswith("@@ ")]
    if not tail:
        raise RuntimeError(proc.stderr[-2000:])
    code, secs, rss = tail[-1].split()[1:]
    errors = [ln for ln in lines if not ln.startswith("@@ ")]
    return int(code), float(secs), float(rss), (errors[-1] if errors else "")


def reproducers() -> int:
    """Issue 15's damaged traces: time, peak RSS and the one-line error of each."""
    tmp = Path(tempfile.mkdtemp(prefix="trainsim-damaged-"))
    try:
        src = _load(DEFAULT_SOURCE / "rank0.json.gz")
        reps = max(1, math.ceil(5e6 / len(orjson.dumps(src))))
        d = tmp / "nan"
        d.mkdir()
        with (d / "rank0.json").open("wb") as fh:
            _write_rank(src, reps, fh)
        data = (d / "rank0.json").read_bytes()
        i = data.index(b'"dur":', len(data) // 2) + 6
        j = min(data.index(b",", i), data.index(b"}", i))
        (d / "rank0.json").write_bytes(data[:i] + b"NaN" + data[j:])
        cases = [("NaN dur in a %.1f MB file" % (len(data) / 1e6), d)]
        d = tmp / "bomb"
        d.mkdir()
        comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        with (d / "rank0.json.gz").open("wb") as fh:
            fh.write(comp.compress(b'{"traceEvents": ['))
            block = b" " * (1 << 24)
            for _ in range(138):  # 2.2 GiB of whitespace
                fh.write(comp.compress(block))
            fh.write(comp.compress(b"]}") + comp.flush())
        cases.append((f"gzip bomb ({(d / 'rank0.json.gz').stat().st_size / 1e6:.1f} MB -> 2.2 GiB)", d))
        d = tmp / "whitespace"
        d.mkdir()
        one = orjson.dumps(src)
        cut = one.index(b"},", one.index(b'"traceEvents"')) + 2
        with (d / "rank0.json").open("wb") as fh:
            fh.write(one[:cut])
            block = (b" " * 1023 + b"\n") * 1024
            for _ in range(1024):  # 1 GiB
                fh.write(block)
            fh.write(one[cut:])
        cases.append(("1 GiB of whitespace between two events", d))
        for label, path in cases:
            code, secs, rss, err = _cli("analyze", "--json", str(path))
            print(f"{label}: exit {code} in {secs:.1f} s, peak RSS {rss:.0f} MB; {err[:200]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
