"""The FIFO window of a multi-node ring's network hop: why a ring slows down at scale at a fixed size.

A ring collective (all-gather, reduce-scatter, all-reduce) moves each rank's share of the data in
``steps`` ring steps; per channel a step carries c = min(chunk, S / (ranks x channels)) bytes, so at
a fixed size S the step shrinks as the ring grows (src/enqueue.cc ``calcCollChunking``: one loop of
channels x ranks x chunk bytes; chunk = ``ALLGATHER/REDUCESCATTER/ALLREDUCE_CHUNKSTEPS`` = 4 FIFO
steps of ``buffSize / NCCL_STEPS``). The Simple protocol sends a step as two slices
(``SLICESTEPS`` = 2 FIFO steps each; src/device/prims_simple.h: a slice is half the step's data).

Across a network hop the receiver lends its FIFO to the sender: its proxy posts a receive for a FIFO
slot only once the GPU has released it (src/transport/net.cc ``recvProxyProgress``: ``posted <
done + maxDepth``, maxDepth = ``NCCL_STEPS`` = 8), and the sender can only write into a posted
receive (the IB plugin's receive FIFO). So at most NCCL_STEPS / CHUNKSTEPS = 2 ring steps are in
flight per connection, and a slot comes back one round trip after its data left:

    round trip = NCCL's Simple network step (hwLat NET + data and flush latency, tuning.cc)
               + the receiving GPU's forward of the slot (NCCL's per-step intra-node latency)
               + the posted receive travelling back (network latency + one network operation)

A step then takes max(tau, (tau + round trip) / 2), tau = the step's share of the bandwidth term:
the ring is window-bound once a step's data takes less time to send than a slot's round trip.
Large messages on a few nodes never are (tau >> round trip); a fixed size on hundreds of ranks is.
Inside a node the GPUs write into each other's buffers and the loop is NCCL's own hop latency,
already priced; LL and LL128 carry their flags in the data and are priced by NCCL's protocol
factors. Times in seconds, sizes in bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from core.vocab import Collective

if TYPE_CHECKING:
    from topo.nccl_model import Candidate

RING_OPS = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE)


def window_stretch(c: Candidate, size: float, bandwidth_s: float, channels: int) -> float:
    """Factor (>= 1) on a multi-node Simple ring's bandwidth term ``bandwidth_s`` (seconds) for
    ``size`` bytes on ``channels`` channels (module docstring); 1 for every other candidate."""
    lay = c.layout
    if c.algorithm != "ring" or c.protocol != "Simple" or lay.nodes < 2 or c.op not in RING_OPS:
        return 1.0
    tau = bandwidth_s / ring_steps(c, size, channels)
    in_flight = c.tuning.steps // c.tuning.ring_chunk_steps
    return max(1.0, (tau + round_trip_s(c)) / (in_flight * tau))


def ring_steps(c: Candidate, size: float, channels: int) -> int:
    """Ring steps the kernel runs: (ranks - 1) per loop (twice for all-reduce) x loops of
    channels x ranks x chunk bytes (src/enqueue.cc ``calcCollChunking``)."""
    t, ranks = c.tuning, c.layout.ranks
    chunk = t.step_bytes("Simple") * t.ring_chunk_steps
    loops = max(1, math.ceil(size / (channels * ranks * chunk)))
    per_loop = 2 * (ranks - 1) if c.op == Collective.ALL_REDUCE else ranks - 1
    return per_loop * loops


def round_trip_s(c: Candidate) -> float:
    """Seconds from a network FIFO slot's data leaving the sender to the sender seeing the slot
    posted again (module docstring), from NCCL's own per-step latencies (src/graph/tuning.cc)."""
    t, lay = c.tuning, c.layout
    net_s = lay.net_latency_s
    data_leg = t.hw_latency("net", "ring", "Simple") + 2 * net_s
    forward = max(t.hw_latency(lay.hw, "ring", "Simple"), t.net_overhead_us * 1e-6)
    credit_leg = net_s + t.net_overhead_us * 1e-6
    return data_leg + forward + credit_leg
