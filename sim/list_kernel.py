"""The list engine's pass as one compiled loop over arrays (numba), step for step the reference
pass of :mod:`sim.list_engine`.

Events are ordered by (time, push order) as there; a task's end pushes its successors' starts
in the same order, a network channel advances and re-times its transfers in the same order
(ascending task id) with the same floating-point operations, so times agree bit for bit (tested
against the reference on every bench case). State lives in flat arrays: per task its transfer
(work left, rate, last update, version, channels), per channel its transfers and how many run on
each lane (a lane is a transfer's stream), per collective group its members in arrival order.

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
    path = np.zeros(n, np.int64)
    for i in range(n):
        if group[i] >= 0:
            path[i] = 2
        elif crosses[i]:
            path[i] = 1
    # network state
    n_ch = 1
    for i in range(n):
        if channel[i] + 1 > n_ch:
            n_ch = channel[i] + 1
    n_lanes = 1
    for i in range(n):
        if lane[i] + 1 > n_lanes:
            n_lanes = lane[i] + 1
    counts = np.zeros((n_ch, n_lanes), np.int64)
    nstreams = np.zeros(n_ch, np.int64)
    cap = 4
    on = np.empty((n_ch, cap), np.int64)
    on_n = np.zeros(n_ch, np.int64)
    t_active = np.zeros(n, np.bool_)
    t_left = np.zeros(n)
    t_rate = np.ones(n)
    t_last = np.zeros(n)
    t_ver = np.zeros(n, np.int64)
    t_ch0 = np.zeros(n, np.int64)
    t_chn = np.zeros(n, np.int64)
    pool = np.empty(64, np.int64)
    pool_n = 0
    # event heap ordered by (time, push order)
    h_time = np.empty(1024)
    h_ord = np.empty(1024, np.int64)
    h_task = np.empty(1024, np.int64)
    h_ver = np.empty(1024, np.int64)
    h_n = 0
    order = 0
    touched = np.empty(16, np.int64)
    stack = np.empty(16, np.int64)
    stack_pos = np.empty(16, np.int64)

    # --- helpers are inlined as closures would not compile; see _push etc. below ---
    for i in range(n):
        if pending[i] != 0:
            continue
        # initial arrivals at time 0 (as the reference: transfer() for path 1, else _arrive)
        res = _arrive_or_transfer(i, 0.0, path, start, dur, group, group_ptr, group_left, group_members,
                                  crosses, channel, lane, exec_group, counts, nstreams, on, on_n, t_active, t_left,
                                  t_rate, t_last, t_ver, t_ch0, t_chn, pool, pool_n, h_time, h_ord, h_task, h_ver,
                                  h_n, order, touched, eps, relres)
        on, pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched = res
    while h_n > 0:
        now = h_time[0]
        a = h_task[0]
        ver = h_ver[0]
        h_n = _heap_pop(h_time, h_ord, h_task, h_ver, h_n)
        if ver < 0:
            executed[a] = True
            if holds_left[a] != 0:
                continue
            first = a
            n_first = 1
        else:
            if not t_active[a] or t_ver[a] != ver:
                continue
            # the transfer ends: leave its channels; re-time the others where its stream left
            gone = False
            for c in range(t_chn[a]):
                ch = pool[t_ch0[a] + c]
                _on_remove(on, on_n, ch, a)
                counts[ch, lane[a]] -= 1
                if counts[ch, lane[a]] == 0:
                    nstreams[ch] -= 1
                    gone = True
            t_active[a] = False
            if gone:
                touched, k = _advance(pool, t_ch0[a], t_chn[a], on, on_n, t_left, t_rate, t_last, now, touched)
                h_time, h_ord, h_task, h_ver, h_n, order = _retime(touched, k, now, pool, t_ch0, t_chn, nstreams,
                                                                  t_left, t_rate, t_last, t_ver, h_time, h_ord,
                                                                  h_task, h_ver, h_n, order, eps, relres)
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
            # position -1 has just ended (its successors are released, inline: a call per task
            # passing the state's ~40 arrays costs ~1 µs), then its holders are visited in order
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
                        if pending[s] != 0:
                            continue
                        if path[s] == 0:
                            start[s] = now
                            h_time, h_ord, h_task, h_ver, h_n = _heap_push(h_time, h_ord, h_task, h_ver, h_n,
                                                                           now + dur[s], order, s, -1)
                            order += 1
                            continue
                        g = group[s]
                        if g >= 0 and not crosses[s] and group_left[g] > 1:  # joins its collective
                            start[s] = now
                            group_members[group_ptr[g] + group_size_arrived(group_ptr, group_left, g)] = s
                            group_left[g] -= 1
                            continue
                        res = _arrive_or_transfer(s, now, path, start, dur, group, group_ptr, group_left,
                                                  group_members, crosses, channel, lane, exec_group, counts, nstreams,
                                                  on, on_n, t_active, t_left, t_rate, t_last, t_ver, t_ch0, t_chn,
                                                  pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched,
                                                  eps, relres)
                        on, pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched = res
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
def _arrive_or_transfer(i, now, path, start, dur, group, group_ptr, group_left, group_members, crosses,  # type: ignore[no-untyped-def]
                        channel, lane, exec_group, counts, nstreams, on, on_n, t_active, t_left, t_rate, t_last,
                        t_ver, t_ch0, t_chn, pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched, eps,
                        relres):
    """Task ``i``'s dependencies have ended: it starts (a transfer of its own, or a task that
    ends ``dur`` later) or joins its collective, which executes when its last member arrives."""
    start[i] = now
    g = group[i]
    count = 1
    first = i
    if g >= 0:
        group_members[group_ptr[g] + group_size_arrived(group_ptr, group_left, g)] = i
        group_left[g] -= 1
        if group_left[g] != 0:
            return on, pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched
        count = group_ptr[g + 1] - group_ptr[g]
        first = -1
    if not crosses[i]:
        t_end = now + dur[i]
        for k in range(count):
            m = first if first >= 0 else group_members[group_ptr[g] + k]
            h_time, h_ord, h_task, h_ver, h_n = _heap_push(h_time, h_ord, h_task, h_ver, h_n, t_end, order, m, -1)
            order += 1
        return on, pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched
    # a transfer on the channels of its members' nodes (sorted, distinct)
    if pool_n + count > pool.size:
        pool = _grow(pool, pool_n + count)
    t_ch0[i] = pool_n
    if first >= 0:
        pool[pool_n] = channel[i]
        t_chn[i] = 1
    else:
        exec_group[i] = g
        chans = np.empty(count, np.int64)
        for k in range(count):
            chans[k] = channel[group_members[group_ptr[g] + k]]
        chans = np.unique(chans)
        for k in range(chans.size):
            pool[pool_n + k] = chans[k]
        t_chn[i] = chans.size
    pool_n += t_chn[i]
    new_stream = False
    for c in range(t_chn[i]):
        if counts[pool[t_ch0[i] + c], lane[i]] == 0:
            new_stream = True
    k = 0
    if new_stream:
        touched, k = _advance(pool, t_ch0[i], t_chn[i], on, on_n, t_left, t_rate, t_last, now, touched)
    t_active[i] = True
    t_left[i] = dur[i]
    t_rate[i] = 1.0
    t_last[i] = now
    t_ver[i] = 0
    for c in range(t_chn[i]):
        ch = pool[t_ch0[i] + c]
        if on_n[ch] >= on.shape[1]:
            on = _grow2(on, on.shape[1] * 2)
        on[ch, on_n[ch]] = i
        on_n[ch] += 1
        if counts[ch, lane[i]] == 0:
            nstreams[ch] += 1
        counts[ch, lane[i]] += 1
    if k >= touched.size:
        touched = _grow(touched, k + 1)
    touched[k] = i
    h_time, h_ord, h_task, h_ver, h_n, order = _retime(touched, k + 1, now, pool, t_ch0, t_chn, nstreams, t_left,
                                                      t_rate, t_last, t_ver, h_time, h_ord, h_task, h_ver, h_n, order,
                                                      eps, relres)
    return on, pool, pool_n, h_time, h_ord, h_task, h_ver, h_n, order, touched


@_jit
def group_size_arrived(group_ptr, group_left, g):  # type: ignore[no-untyped-def]
    """How many members of group ``g`` arrived so far."""
    return group_ptr[g + 1] - group_ptr[g] - group_left[g]


@_jit
def _advance(pool, c0, cn, on, on_n, t_left, t_rate, t_last, now, touched):  # type: ignore[no-untyped-def]
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
    if k == 0:
        return touched, 0
    ids = np.unique(touched[:k])
    k = ids.size
    for j in range(k):
        t = ids[j]
        touched[j] = t
        t_left[t] -= (now - t_last[t]) * t_rate[t]
        t_last[t] = now
    return touched, k


@_jit
def _retime(touched, k, now, pool, t_ch0, t_chn, nstreams, t_left, t_rate, t_last, t_ver, h_time, h_ord,  # type: ignore[no-untyped-def]
            h_task, h_ver, h_n, order, eps, relres):
    """Push the new end of each transfer in ``touched[:k]`` at its new rate (1 / the most
    streams on one of its channels); one with no time left (within the resolution) ends now."""
    tol = max(eps, relres * abs(now))
    for j in range(k):
        t = touched[j]
        most = 0
        for c in range(t_chn[t]):
            s = nstreams[pool[t_ch0[t] + c]]
            if s > most:
                most = s
        t_rate[t] = 1.0 / most
        t_ver[t] += 1
        t_end = t_last[t] + max(t_left[t], 0.0) / t_rate[t]
        if t_left[t] <= eps or t_left[t] <= tol * t_rate[t]:
            t_end = now
        h_time, h_ord, h_task, h_ver, h_n = _heap_push(h_time, h_ord, h_task, h_ver, h_n, t_end, order, t, t_ver[t])
        order += 1
    return h_time, h_ord, h_task, h_ver, h_n, order


@_jit
def _on_remove(on, on_n, ch, t):  # type: ignore[no-untyped-def]
    for j in range(on_n[ch]):
        if on[ch, j] == t:
            on[ch, j] = on[ch, on_n[ch] - 1]
            on_n[ch] -= 1
            return


@_jit
def _heap_push(h_time, h_ord, h_task, h_ver, h_n, t, o, task, ver):  # type: ignore[no-untyped-def]
    if h_n >= h_time.size:
        h_time = _grow(h_time, h_n + 1)
        h_ord = _grow(h_ord, h_n + 1)
        h_task = _grow(h_task, h_n + 1)
        h_ver = _grow(h_ver, h_n + 1)
    j = h_n
    while j > 0:
        parent = (j - 1) >> 1
        if h_time[parent] < t or (h_time[parent] == t and h_ord[parent] < o):
            break
        _heap_put(h_time, h_ord, h_task, h_ver, j, h_time[parent], h_ord[parent], h_task[parent], h_ver[parent])
        j = parent
    _heap_put(h_time, h_ord, h_task, h_ver, j, t, o, task, ver)
    return h_time, h_ord, h_task, h_ver, h_n + 1


@_jit
def _heap_pop(h_time, h_ord, h_task, h_ver, h_n):  # type: ignore[no-untyped-def]
    """Remove the smallest entry (at 0); returns the new size."""
    h_n -= 1
    if h_n == 0:
        return 0
    t, o, task, ver = h_time[h_n], h_ord[h_n], h_task[h_n], h_ver[h_n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= h_n:
            break
        if c + 1 < h_n and (h_time[c + 1] < h_time[c] or (h_time[c + 1] == h_time[c] and h_ord[c + 1] < h_ord[c])):
            c += 1
        if t < h_time[c] or (t == h_time[c] and o < h_ord[c]):
            break
        _heap_put(h_time, h_ord, h_task, h_ver, j, h_time[c], h_ord[c], h_task[c], h_ver[c])
        j = c
    _heap_put(h_time, h_ord, h_task, h_ver, j, t, o, task, ver)
    return h_n


@_jit
def _heap_put(h_time, h_ord, h_task, h_ver, j, t, o, task, ver):  # type: ignore[no-untyped-def]
    """Heap entry ``j`` := (time, push order, task, transfer version)."""
    h_time[j] = t
    h_ord[j] = o
    h_task[j] = task
    h_ver[j] = ver


@_jit
def _grow(a, need):  # type: ignore[no-untyped-def]
    out = np.empty(max(need, 2 * a.size), a.dtype)
    out[:a.size] = a
    return out


@_jit
def _grow2(a, cols):  # type: ignore[no-untyped-def]
    out = np.empty((a.shape[0], cols), a.dtype)
    out[:, :a.shape[1]] = a
    return out
