"""The list engine's pass as one compiled loop over arrays (numba), step for step the reference
pass of :mod:`sim.list_engine`.

Events are ordered by (time, push order) as there; a task's end pushes its successors' starts
in the same order, a network channel advances and re-times its transfers in the same order
(ascending task id) with the same floating-point operations, so times agree bit for bit (tested
against the reference on every bench case). State lives in flat arrays: per task its transfer
(work left, rate, last update, version, channels), per channel its transfers and how many run on
each lane (a lane is a transfer's stream), per collective group its members in arrival order.

The tasks a task's end releases are collected first and then arrive one by one, in release order,
in the loop itself (the reference handles each as it is released: the same pushes in the same
order, since releasing pushes nothing). A call between compiled functions costs about a reference
count per array passed, so the loop inlines the arrival and the helpers take packed state (the
transfers' floats and integers, the heap's times and integers, each one 2-D array): 2.6x faster
than a helper call per arrival with ~35 arrays (1T bench graph, 73k tasks: 77 -> 30 ms a pass).

This module imports numba (an optional dependency, ``pip install trainsim[fast]``): import it
only after :func:`sim.list_passes.numba_available` (:class:`sim.list_passes.GraphPasses` chooses). Importing numba and loading the compiled
loop (cached on disk after its first compilation) costs ~0.4 s, so callers use it for large
graphs only.
"""

from __future__ import annotations

import numba
import numpy as np

from sim.fluid import EPS, RELATIVE_RESOLUTION
from sim.list_program import Program

_jit = numba.njit(cache=True, nogil=True)


def run_compiled(p: Program, durations: np.ndarray, crosses: np.ndarray,
                 gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (seconds) of every task (NaN: never ran, a deadlock)."""
    channel = p.rank // gpus_per_node
    return _run(p.succ.ptr, p.succ.index, p.pending, p.holders.ptr, p.holders.index, p.holds, p.group,
                      p.group_size, channel, p.lane, np.ascontiguousarray(durations, np.float64),
                      np.ascontiguousarray(crosses, np.bool_), EPS, RELATIVE_RESOLUTION)


@_jit
def _run(succ_ptr, succ_idx, pending0, holder_ptr, holder_idx, holds0, group, group_size, channel, lane,  # noqa: C901
         dur, crosses, eps, relres):  # type: ignore[no-untyped-def]
    """The pass (compiled by numba; see the module doc). Arrays only, no Python objects."""
    n = pending0.size
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    pending = pending0.copy()
    holds_left = holds0.copy()
    executed = np.zeros(n, np.bool_)
    n_groups = group_size.size
    group_left = group_size.copy()
    group_ptr = np.zeros(n_groups + 1, np.int64)
    for g in range(n_groups):
        group_ptr[g + 1] = group_ptr[g] + group_size[g]
    group_members = np.empty(max(group_ptr[n_groups], 1), np.int64)
    exec_group = np.full(n, -1, np.int64)  # a crossing collective's executing task -> its group
    # network state: per channel (a node) its transfers and how many run on each lane (stream)
    n_ch = 1
    n_lanes = 1
    for i in range(n):
        n_ch = max(n_ch, channel[i] + 1)
        n_lanes = max(n_lanes, lane[i] + 1)
    counts = np.zeros((n_ch, n_lanes), np.int64)
    nstreams = np.zeros(n_ch, np.int64)
    on = np.empty((n_ch, 4), np.int64)
    on_n = np.zeros(n_ch, np.int64)
    # per transfer: work left, rate, last update (t_f); active, version, first channel, channels (t_i)
    t_f = np.zeros((n, 3))
    t_i = np.zeros((n, 4), np.int64)
    pool = np.empty(64, np.int64)  # the channels of every transfer, t_i[:, 2:4] slices of it
    pool_n = 0
    # event heap ordered by (time, push order): h_time, and (push order, task, transfer version)
    h_time = np.empty(1024)
    h_int = np.empty((1024, 3), np.int64)
    h_n = 0
    order = 0
    touched = np.empty(16, np.int64)
    stack = np.empty(16, np.int64)
    stack_pos = np.empty(16, np.int64)
    ready = np.empty(64, np.int64)  # tasks whose dependencies ended at ``now``, in release order
    ready_n = 0
    for i in range(n):  # the initial arrivals, at time 0
        if pending[i] == 0:
            if ready_n >= ready.size:
                ready = _grow(ready, ready_n + 1)
            ready[ready_n] = i
            ready_n += 1
    now = 0.0
    while True:
        # arrivals (as the reference's _arrive and transfer(), in release order): a task starts
        # (a transfer of its own, or a task ending dur later) or joins its collective, which
        # executes when its last member arrives
        for r in range(ready_n):
            i = ready[r]
            start[i] = now
            g = group[i]
            count = 1
            if g >= 0:
                group_members[group_ptr[g] + group_ptr[g + 1] - group_ptr[g] - group_left[g]] = i
                group_left[g] -= 1
                if group_left[g] != 0:
                    continue
                count = group_ptr[g + 1] - group_ptr[g]
            if not crosses[i]:
                t_end = now + dur[i]
                for k in range(count):
                    m = i if g < 0 else group_members[group_ptr[g] + k]
                    h_time, h_int, h_n = _heap_push(h_time, h_int, h_n, t_end, order, m, -1)
                    order += 1
                continue
            # a transfer on the channels of its members' nodes (sorted, distinct)
            if pool_n + count > pool.size:
                pool = _grow(pool, pool_n + count)
            t_i[i, 2] = pool_n
            if g < 0:
                pool[pool_n] = channel[i]
                t_i[i, 3] = 1
            else:
                exec_group[i] = g
                for k in range(count):
                    pool[pool_n + k] = channel[group_members[group_ptr[g] + k]]
                t_i[i, 3] = _sort_distinct(pool, pool_n, count)
            pool_n += t_i[i, 3]
            c0 = t_i[i, 2]
            cn = t_i[i, 3]
            new_stream = False
            for c in range(cn):
                if counts[pool[c0 + c], lane[i]] == 0:
                    new_stream = True
            k = 0
            if new_stream:
                touched, k = _advance(pool, c0, cn, on, on_n, t_f, now, touched)
            t_i[i, 0] = 1
            t_i[i, 1] = 0
            t_f[i, 0] = dur[i]
            t_f[i, 1] = 1.0
            t_f[i, 2] = now
            for c in range(cn):
                ch = pool[c0 + c]
                if on_n[ch] >= on.shape[1]:
                    on = _grow_cols(on, on.shape[1] * 2)
                on[ch, on_n[ch]] = i
                on_n[ch] += 1
                if counts[ch, lane[i]] == 0:
                    nstreams[ch] += 1
                counts[ch, lane[i]] += 1
            if k >= touched.size:
                touched = _grow(touched, k + 1)
            touched[k] = i
            h_time, h_int, h_n, order = _retime(touched, k + 1, now, pool, t_f, t_i, nstreams, h_time, h_int, h_n,
                                                order, eps, relres)
        ready_n = 0
        if h_n == 0:
            break
        now = h_time[0]
        a = h_int[0, 1]
        ver = h_int[0, 2]
        h_n = _heap_pop(h_time, h_int, h_n)
        if ver < 0:
            executed[a] = True
            if holds_left[a] != 0:
                continue
            first = a
            n_first = 1
        else:
            if t_i[a, 0] == 0 or t_i[a, 1] != ver:
                continue
            # the transfer ends: leave its channels; re-time the others where its stream left
            gone = False
            for c in range(t_i[a, 3]):
                ch = pool[t_i[a, 2] + c]
                for j in range(on_n[ch]):
                    if on[ch, j] == a:
                        on[ch, j] = on[ch, on_n[ch] - 1]
                        on_n[ch] -= 1
                        break
                counts[ch, lane[a]] -= 1
                if counts[ch, lane[a]] == 0:
                    nstreams[ch] -= 1
                    gone = True
            t_i[a, 0] = 0
            if gone:
                touched, k = _advance(pool, t_i[a, 2], t_i[a, 3], on, on_n, t_f, now, touched)
                h_time, h_int, h_n, order = _retime(touched, k, now, pool, t_f, t_i, nstreams, h_time, h_int, h_n,
                                                    order, eps, relres)
            g = exec_group[a]
            if g >= 0:
                first = -1
                n_first = group_size[g]
            else:
                first = a
                n_first = 1
        # the executed tasks (a, or its collective's members in arrival order) end unless held
        for m_i in range(n_first):
            m = first if first >= 0 else group_members[group_ptr[exec_group[a]] + m_i]
            if ver >= 0:
                executed[m] = True
                if holds_left[m] != 0:
                    continue
            # ended(m, now), with the holders' recursion as an explicit stack: an entry at
            # position -1 has just ended (its successors are released into ``ready``), then its
            # holders are visited in order
            depth = 0
            stack[0] = m
            stack_pos[0] = -1
            while depth >= 0:
                top = stack[depth]
                pos = stack_pos[depth]
                if pos < 0:
                    end[top] = now
                    stack_pos[depth] = 0
                    for j in range(succ_ptr[top], succ_ptr[top + 1]):
                        s = succ_idx[j]
                        pending[s] -= 1
                        if pending[s] == 0:
                            if ready_n >= ready.size:
                                ready = _grow(ready, ready_n + 1)
                            ready[ready_n] = s
                            ready_n += 1
                    continue
                if holder_ptr[top] + pos >= holder_ptr[top + 1]:
                    depth -= 1
                    continue
                stack_pos[depth] = pos + 1
                h = holder_idx[holder_ptr[top] + pos]
                holds_left[h] -= 1
                if holds_left[h] == 0 and executed[h]:
                    depth += 1
                    if depth >= stack.size:
                        stack = _grow(stack, depth + 1)
                        stack_pos = _grow(stack_pos, depth + 1)
                    stack[depth] = h
                    stack_pos[depth] = -1
    return start, end


@_jit
def _advance(pool, c0, cn, on, on_n, t_f, now, touched):  # type: ignore[no-untyped-def]
    """Advance the transfers on channels ``pool[c0:c0+cn]`` to ``now`` (ascending ids); returns
    (the ids in ``touched[:k]``, k)."""
    k = 0
    for c in range(cn):
        ch = pool[c0 + c]
        for j in range(on_n[ch]):
            if k >= touched.size:
                touched = _grow(touched, k + 1)
            touched[k] = on[ch, j]
            k += 1
    k = _sort_distinct(touched, 0, k)
    for j in range(k):
        t = touched[j]
        t_f[t, 0] -= (now - t_f[t, 2]) * t_f[t, 1]
        t_f[t, 2] = now
    return touched, k


@_jit
def _retime(touched, k, now, pool, t_f, t_i, nstreams, h_time, h_int, h_n, order, eps, relres):  # type: ignore[no-untyped-def]
    """Push the new end of each transfer in ``touched[:k]`` at its new rate (1 / the most
    streams on one of its channels); one with no time left (within the resolution) ends now."""
    tol = max(eps, relres * abs(now))
    for j in range(k):
        t = touched[j]
        most = 0
        for c in range(t_i[t, 3]):
            s = nstreams[pool[t_i[t, 2] + c]]
            if s > most:
                most = s
        t_f[t, 1] = 1.0 / most
        t_i[t, 1] += 1
        t_end = t_f[t, 2] + max(t_f[t, 0], 0.0) / t_f[t, 1]
        if t_f[t, 0] <= eps or t_f[t, 0] <= tol * t_f[t, 1]:
            t_end = now
        h_time, h_int, h_n = _heap_push(h_time, h_int, h_n, t_end, order, t, t_i[t, 1])
        order += 1
    return h_time, h_int, h_n, order


@_jit
def _heap_push(h_time, h_int, h_n, t, o, task, ver):  # type: ignore[no-untyped-def]
    """Add the entry (time ``t``, push order ``o``, ``task``, transfer version ``ver``)."""
    if h_n >= h_time.size:
        h_time = _grow(h_time, h_n + 1)
        h_int = _grow_rows(h_int, h_time.size)
    j = h_n
    while j > 0:
        parent = (j - 1) >> 1
        if h_time[parent] < t or (h_time[parent] == t and h_int[parent, 0] < o):
            break
        h_time[j] = h_time[parent]
        h_int[j, 0] = h_int[parent, 0]
        h_int[j, 1] = h_int[parent, 1]
        h_int[j, 2] = h_int[parent, 2]
        j = parent
    h_time[j] = t
    h_int[j, 0] = o
    h_int[j, 1] = task
    h_int[j, 2] = ver
    return h_time, h_int, h_n + 1


@_jit
def _heap_pop(h_time, h_int, h_n):  # type: ignore[no-untyped-def]
    """Remove the smallest entry (at 0); returns the new size."""
    h_n -= 1
    if h_n == 0:
        return 0
    t, o, task, ver = h_time[h_n], h_int[h_n, 0], h_int[h_n, 1], h_int[h_n, 2]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= h_n:
            break
        if c + 1 < h_n and (h_time[c + 1] < h_time[c] or (h_time[c + 1] == h_time[c] and h_int[c + 1, 0] < h_int[c, 0])):
            c += 1
        if t < h_time[c] or (t == h_time[c] and o < h_int[c, 0]):
            break
        h_time[j] = h_time[c]
        h_int[j, 0] = h_int[c, 0]
        h_int[j, 1] = h_int[c, 1]
        h_int[j, 2] = h_int[c, 2]
        j = c
    h_time[j] = t
    h_int[j, 0] = o
    h_int[j, 1] = task
    h_int[j, 2] = ver
    return h_n


@_jit
def _sort_distinct(a, lo, k):  # type: ignore[no-untyped-def]
    """Sort ``a[lo:lo+k]`` ascending in place and drop repeats (insertion sort: a few entries);
    returns how many distinct values now lead it (``np.unique``'s, without allocating)."""
    for j in range(lo + 1, lo + k):
        v = a[j]
        i = j - 1
        while i >= lo and a[i] > v:
            a[i + 1] = a[i]
            i -= 1
        a[i + 1] = v
    if k == 0:
        return 0
    m = 1
    for j in range(lo + 1, lo + k):
        if a[j] != a[lo + m - 1]:
            a[lo + m] = a[j]
            m += 1
    return m


@_jit
def _grow(a, need):  # type: ignore[no-untyped-def]
    out = np.empty(max(need, 2 * a.size), a.dtype)
    out[:a.size] = a
    return out


@_jit
def _grow_cols(a, cols):  # type: ignore[no-untyped-def]
    """``a`` (2-D) with ``cols`` columns, the old ones copied."""
    out = np.empty((a.shape[0], cols), a.dtype)
    out[:, :a.shape[1]] = a
    return out


@_jit
def _grow_rows(a, rows):  # type: ignore[no-untyped-def]
    """``a`` (2-D) with ``rows`` rows, the old ones copied."""
    out = np.empty((rows, a.shape[1]), a.dtype)
    out[:a.shape[0]] = a
    return out
