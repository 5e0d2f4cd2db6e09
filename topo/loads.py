"""Accumulate the bytes that concurrent transfers put on each directed link (vectorized).

Loads are coefficients: "bytes on the link per byte of the collective's size S". A transfer of
c*S bytes from device a to device b adds c to every directed edge on its route. Cross-node routes
are decomposed into the source's up path (GPU ... NIC -> leaf), the leaf<->core (or leaf<->pod and
pod<->core) links and the destination's down path, so transfers are summed per device with ``np.bincount`` and expanded to
edges once; a ring over 16k GPUs is a handful of array operations.
"""

from __future__ import annotations

import numpy as np

from topo.routing import Router

IntArray = np.ndarray
FloatArray = np.ndarray


class LinkLoads:
    """Coefficients per directed edge id for a set of transfers that run at the same time."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._pairs: list[tuple[IntArray, IntArray, FloatArray]] = []
        self._edges: list[tuple[IntArray, FloatArray]] = []
        self._up: list[tuple[IntArray, FloatArray]] = []
        self._down: list[tuple[IntArray, FloatArray]] = []
        self._core: list[tuple[IntArray, FloatArray, FloatArray]] = []
        self._pods: list[tuple[IntArray, FloatArray, FloatArray]] = []

    def add(self, src: IntArray | int, dst: IntArray | int, coef: FloatArray | float) -> None:
        """Transfers of ``coef`` * S bytes from devices ``src`` to devices ``dst`` (arrays or ints)."""
        s, d = np.atleast_1d(np.asarray(src, dtype=np.int64)), np.atleast_1d(np.asarray(dst, dtype=np.int64))
        self._pairs.append((s, d, np.broadcast_to(np.asarray(coef, dtype=float), s.shape)))

    def add_edges(self, edges: IntArray, coef: FloatArray | float) -> None:
        """Load directed edges directly (in-switch traffic such as NVLS)."""
        e = np.atleast_1d(np.asarray(edges, dtype=np.int64))
        self._edges.append((e, np.broadcast_to(np.asarray(coef, dtype=float), e.shape)))

    def add_uplinks(self, devices: IntArray, coef: FloatArray) -> None:
        """``coef`` * S bytes from each device up to its leaf (aggregated all-to-all traffic)."""
        self._up.append((np.asarray(devices, dtype=np.int64), np.asarray(coef, dtype=float)))

    def add_downlinks(self, devices: IntArray, coef: FloatArray) -> None:
        """``coef`` * S bytes from each device's leaf down to the device."""
        self._down.append((np.asarray(devices, dtype=np.int64), np.asarray(coef, dtype=float)))

    def add_core(self, leaves: IntArray, out_coef: FloatArray, in_coef: FloatArray) -> None:
        """Traffic leaving / entering leaves (leaf indices) through the core."""
        self._core.append((np.asarray(leaves, dtype=np.int64), np.asarray(out_coef, dtype=float),
                           np.asarray(in_coef, dtype=float)))

    def add_pods(self, pods: IntArray, out_coef: FloatArray, in_coef: FloatArray) -> None:
        """Traffic leaving / entering pods (pod indices) through the core (three tiers)."""
        self._pods.append((np.asarray(pods, dtype=np.int64), np.asarray(out_coef, dtype=float),
                           np.asarray(in_coef, dtype=float)))

    def totals(self) -> FloatArray:
        """Coefficient per directed edge id (dense array over all edges)."""
        r = self._router
        n_edges, n_dev = len(r.ends), r.spec.num_gpus
        out = np.zeros(n_edges)
        up, down = np.zeros(n_dev), np.zeros(n_dev)
        n_leaves, n_pods = len(r.leaf_out), len(r.pod_out)
        core_out, core_in = np.zeros(n_leaves), np.zeros(n_leaves)
        pod_out, pod_in = np.zeros(n_pods), np.zeros(n_pods)
        for e, c in self._edges:
            out += np.bincount(e, c, minlength=n_edges)
        for src, dst, coef in self._pairs:
            same = r.node_arr[src] == r.node_arr[dst]
            self._add_intra(out, src[same], dst[same], coef[same])
            src, dst, coef = src[~same], dst[~same], coef[~same]
            up += np.bincount(src, coef, minlength=n_dev)
            down += np.bincount(dst, coef, minlength=n_dev)
            la, lb = r.leaf_arr[src], r.leaf_arr[dst]
            far = la != lb
            if far.any():
                core_out += np.bincount(la[far], coef[far], minlength=n_leaves)
                core_in += np.bincount(lb[far], coef[far], minlength=n_leaves)
            if n_pods:
                pa, pb = r.leaf_pod[la], r.leaf_pod[lb]
                apart = pa != pb
                pod_out += np.bincount(pa[apart], coef[apart], minlength=n_pods)
                pod_in += np.bincount(pb[apart], coef[apart], minlength=n_pods)
        for devices, coef in self._up:
            up += np.bincount(devices, coef, minlength=n_dev)
        for devices, coef in self._down:
            down += np.bincount(devices, coef, minlength=n_dev)
        for leaves, c_out, c_in in self._core:
            core_out += np.bincount(leaves, c_out, minlength=n_leaves)
            core_in += np.bincount(leaves, c_in, minlength=n_leaves)
        for pods, c_out, c_in in self._pods:
            pod_out += np.bincount(pods, c_out, minlength=n_pods)
            pod_in += np.bincount(pods, c_in, minlength=n_pods)
        if len(r.up_flat):
            out += np.bincount(r.up_flat, np.repeat(up, r.up_len), minlength=n_edges)
            out += np.bincount(r.down_flat, np.repeat(down, r.down_len), minlength=n_edges)
        if n_leaves:
            out += np.bincount(r.leaf_out, core_out, minlength=n_edges)
            out += np.bincount(r.leaf_in, core_in, minlength=n_edges)
        if n_pods:
            out += np.bincount(r.pod_out, pod_out, minlength=n_edges)
            out += np.bincount(r.pod_in, pod_in, minlength=n_edges)
        return out

    def _add_intra(self, out: FloatArray, src: IntArray, dst: IntArray, coef: FloatArray) -> None:
        """Same-node transfers: through the NVSwitch vectorized, else route by route (cached)."""
        r = self._router
        if not len(src):
            return
        if r.sw_in is not None and r.sw_out is not None:
            out += np.bincount(r.sw_in[src], coef, minlength=len(out))
            out += np.bincount(r.sw_out[dst], coef, minlength=len(out))
            return
        for a, b, c in zip(src.tolist(), dst.tolist(), coef.tolist(), strict=True):
            for e in r.intra(a, b)[0]:
                out[e] += c
