"""Where work units run: this process, local worker processes, or a Dask or Ray cluster.

Every backend takes batches of :class:`~sim.explore.evaluate.WorkUnit` and yields each batch's
rows as soon as that batch is done (in completion order), so the caller can write them at once.
A batch runs with one :class:`~sim.explore.evaluate.Evaluator` (its caches live for the batch).
Dask (``pip install 'trainsim[distributed]'``) and Ray (``pip install ray``) are optional and
imported only when used.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import socket
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from core.errors import invalid
from sim.explore.evaluate import Evaluator, WorkUnit, evaluate_units
from sim.gc_pause import own_process

Rows = list[dict[str, Any]]


class Backend(Protocol):
    """Runs work units; ``run`` yields the rows of finished units (it may be called several
    times, once per wave of a sweep that skips plans by their bound); ``width``: units it runs at
    once; ``close`` frees what it kept between calls (worker processes)."""

    width: int

    def run(self, units: Sequence[WorkUnit]) -> Iterator[Rows]: ...

    def close(self) -> None: ...


def batches(units: Sequence[WorkUnit], workers: int, per_worker: int = 4, max_units: int = 4) -> list[list[WorkUnit]]:
    """Contiguous slices (units of one placement stay together): at least ``per_worker`` per worker,
    at most ``max_units`` units each (so rows keep coming while the sweep runs)."""
    if not units:
        return []
    size = max(1, min(max_units, math.ceil(len(units) / (workers * per_worker))))
    return [list(units[i:i + size]) for i in range(0, len(units), size)]


def _flatten(result: list[Rows]) -> Rows:
    return [row for unit_rows in result for row in unit_rows]


class InProcess:
    """Evaluates unit by unit in this process (one Evaluator for the whole sweep)."""

    width = 1

    def __init__(self) -> None:
        self.evaluator = Evaluator()  # the sweep's bounds may share its caches

    def run(self, units: Sequence[WorkUnit]) -> Iterator[Rows]:
        """Yield each unit's rows as it finishes."""
        for unit in units:
            yield self.evaluator.evaluate(unit)

    def close(self) -> None:
        """Drop the evaluator's caches."""
        self.evaluator = Evaluator()


class LocalProcesses:
    """A pool of ``workers`` local processes (concurrent.futures)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise invalid("workers", workers, "expected an integer >= 1")
        self.workers = self.width = workers
        self._pool: cf.ProcessPoolExecutor | None = None

    def run(self, units: Sequence[WorkUnit]) -> Iterator[Rows]:
        """Yield each batch's rows as it finishes (the pool stays up for the next call until
        :meth:`close`; its workers keep their evaluators' caches)."""
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(max_workers=self.workers, initializer=own_process)
        futures = [self._pool.submit(evaluate_units, b) for b in batches(units, self.workers)]
        try:
            for fut in cf.as_completed(futures):
                yield _flatten(fut.result())
        finally:
            for fut in futures:
                fut.cancel()

    def close(self) -> None:
        """Shut the worker processes down."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


DASK_INSTALL = "pip install 'trainsim[distributed]'"
RAY_INSTALL = "pip install ray"
CONNECT_TIMEOUT_S = 30.0
"""How long a cluster address may take to accept a connection (Dask's own connect timeout,
``distributed.comm.timeouts.connect`` = 30 s; Ray's ``ray.init`` has none and waited forever)."""
DEFAULT_PORTS = {"tcp": 8786, "tls": 8786, "ray": 10001}  # Dask's scheduler, Ray's client server


def cluster_endpoint(address: str) -> tuple[str, int] | None:
    """The (host, port) a Dask or Ray address connects to (``tcp://h:8786``, ``ray://h:10001``,
    ``h:6379``), or None for addresses that name no TCP endpoint (``auto``, ``local``, ``inproc://``)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    if scheme not in ("", *DEFAULT_PORTS):
        return None
    try:
        parts = urllib.parse.urlsplit("//" + rest)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or (port is None and not scheme):
        return None
    return parts.hostname, port if port is not None else DEFAULT_PORTS[scheme]


def check_reachable(flag: str, address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A one-line ValueError unless ``address`` (a Dask or Ray cluster) accepts a TCP connection within
    ``timeout_s`` seconds; nothing is checked for addresses without an endpoint (:func:`cluster_endpoint`)."""
    endpoint = cluster_endpoint(address)
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=timeout_s).close()
    except TimeoutError:
        raise invalid(flag, address, f"no answer from {endpoint[0]}:{endpoint[1]} within {timeout_s:g} s") from None
    except OSError as exc:
        raise invalid(flag, address, f"cannot connect to {endpoint[0]}:{endpoint[1]} ({exc.strerror or exc})") from None


class DaskCluster:
    """An existing Dask cluster, by scheduler address (e.g. ``tcp://10.0.0.5:8786``)."""

    width = 8  # plans per wave when skipping by bound (the cluster's size is known only once connected)

    def __init__(self, address: str) -> None:
        check_reachable("dask", address)
        _require("distributed", "--dask", DASK_INSTALL)  # before any work, not once the sweep is planned
        self.address = address

    def close(self) -> None:
        """Nothing is kept between calls."""

    def run(self, units: Sequence[WorkUnit]) -> Iterator[Rows]:
        """Submit one task per batch; yield each batch's rows as it finishes."""
        distributed = _require("distributed", "--dask", DASK_INSTALL)
        with distributed.Client(self.address) as client:
            workers = max(1, sum(client.nthreads().values()))
            futures = client.map(evaluate_units, batches(units, workers), pure=False)
            for fut in distributed.as_completed(futures):
                yield _flatten(fut.result())


class RayCluster:
    """An existing Ray cluster, by address (``auto``, or ``ray://host:10001``)."""

    width = 8  # plans per wave when skipping by bound (the cluster's size is known only once connected)

    def __init__(self, address: str) -> None:
        check_reachable("ray", address)
        _require("ray", "--ray", RAY_INSTALL)  # before any work, not once the sweep is planned
        self.address = address

    def close(self) -> None:
        """Nothing is kept between calls."""

    def run(self, units: Sequence[WorkUnit]) -> Iterator[Rows]:
        """Submit one task per batch; yield each batch's rows as it finishes."""
        ray = _require("ray", "--ray", RAY_INSTALL)
        ray.init(address=self.address, ignore_reinit_error=True)
        remote = ray.remote(evaluate_units)
        pending = [remote.remote(b) for b in batches(units, max(1, int(ray.cluster_resources().get("CPU", 1))))]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield _flatten(ray.get(done[0]))


def make_backend(workers: int | None = None, dask: str | None = None, ray: str | None = None) -> Backend:
    """The backend the CLI flags ask for (default: one local process per core)."""
    if dask and ray:
        raise invalid("dask", dask, "use either --dask or --ray, not both")
    if dask:
        return DaskCluster(dask)
    if ray:
        return RayCluster(ray)
    n = workers if workers is not None else (os.cpu_count() or 1)
    return InProcess() if n == 1 else LocalProcesses(n)


def _require(module: str, flag: str, how: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ValueError(f"{flag} needs the optional '{module}' package: {how}") from None
