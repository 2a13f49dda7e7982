"""How the readers one replication depends on are doing, for its raw-metrics replication report.

Each reader of an internal topic takes records from whoever may produce there and refuses the ones it
cannot use (``clients.record_guard.RecordGuard``). The counts and whether each reader still reads would
otherwise live only in the driver's log; this registry gathers them so the replication report carries
them (``ReplicationMetrics.readers``) and the service shows them in the replication's status and
``/metrics``.

A kind's guard is made once and kept across the worker's restarts, so ``rejected`` is a total since
the driver started, as a Prometheus counter expects. Kinds (``raw_metrics.READER_KINDS``):

- ``progress``: ``mm2-offsets.<source>.internal``, read by the replication worker when it takes
  partitions;
- ``control``: ``srm-control.internal`` of the target, one reader shared by every replication into it;
- ``offset_syncs``: the offset syncs the checkpoint worker follows (its own and, for fail-back, the
  reverse replication's);
- ``checkpoints``: ``<source>.checkpoints.internal``, read when the checkpoint worker starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clients.record_guard import RecordGuard
from contract.records.raw_metrics import READER_KINDS, ReaderHealth
from driver import progress_record

LOG = logging.getLogger(__name__)


class ReplicationReaders:
    """Thread-safe registry: the workers add their readers' guards and liveness, the report reads them."""

    def __init__(self, replication: str) -> None:
        self.replication = replication
        self._lock = threading.Lock()
        self._guards: dict[str, RecordGuard] = {}
        self._alive: dict[str, Callable[[], bool]] = {}

    def guard(self, kind: str, *, max_key_bytes: int, max_value_bytes: int,
              logger: logging.Logger) -> RecordGuard:
        """The guard of ``kind`` readers of this replication, made on first use and kept afterwards."""
        _check_kind(kind)
        with self._lock:
            guard = self._guards.get(kind)
            if guard is None:
                guard = self._guards[kind] = RecordGuard(
                    f"{kind.replace('_', '-')} reader of {self.replication}", max_key_bytes=max_key_bytes,
                    max_value_bytes=max_value_bytes, logger=logger)
            return guard

    def adopt(self, kind: str, guard: RecordGuard, alive: Callable[[], bool]) -> None:
        """A reader that owns its guard (one shared by several replications: the control lists)."""
        _check_kind(kind)
        with self._lock:
            self._guards[kind], self._alive[kind] = guard, alive

    def progress_guard(self, worker: threading.Thread) -> RecordGuard:
        """The replication worker's guard of its progress topic. Progress is read when partitions come:
        it reads while the worker runs with its reader open (``worker.progress``; None between attempts)."""
        self.watch("progress", lambda: worker.is_alive() and getattr(worker, "progress", None) is not None)
        return self.guard("progress", max_key_bytes=progress_record.MAX_KEY_BYTES,
                          max_value_bytes=progress_record.MAX_VALUE_BYTES, logger=LOG)

    def adopt_control(self, lists: object) -> None:
        """The target's srm-control lists (``driver.control_lists.ControlLists``): its own guard, alive
        while its thread reads without a failure outside a record. Lists without a guard (a fixed set
        in a test) are left out."""
        guard, is_alive = getattr(lists, "guard", None), getattr(lists, "is_alive", None)
        if isinstance(guard, RecordGuard) and callable(is_alive):
            self.adopt("control", guard, lambda: bool(is_alive()) and getattr(lists, "failure", None) is None)

    def watch(self, kind: str, alive: Callable[[], bool]) -> None:
        """How to tell whether the ``kind`` reader reads now (replaced when its worker starts again)."""
        _check_kind(kind)
        with self._lock:
            self._alive[kind] = alive

    def report(self) -> dict[str, ReaderHealth] | None:
        """Kind -> health of every reader known so far; None before any (a worker still starting)."""
        with self._lock:
            entries = [(kind, self._guards.get(kind), self._alive.get(kind)) for kind in READER_KINDS]
        healths = {kind: ReaderHealth(guard.rejected if guard else 0, _alive(alive),
                                      guard.last_rejection if guard else None)
                   for kind, guard, alive in entries if guard is not None or alive is not None}
        return healths or None


def _alive(probe: Callable[[], bool] | None) -> bool:
    if probe is None:
        return False
    try:
        return bool(probe())
    except Exception:  # a probe of a reader being torn down: it does not read
        return False


def _check_kind(kind: str) -> None:
    if kind not in READER_KINDS:
        raise ValueError(f"unknown reader kind {kind!r}; known: {', '.join(READER_KINDS)}")
