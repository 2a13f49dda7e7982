"""When to emit offset syncs, and how many may be in flight (MM2 compatible).

Written by the source task: `on_record_committed` for every record the target
acknowledged, `on_offsets_flushed` after each periodic source-offset flush. The
injected `send` callable produces one sync to partition 0 of the offset-syncs
topic and must invoke the completion callback exactly once when the producer
reports delivery (or failure).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from contract.settings import default_of

LOG = logging.getLogger(__name__)

DEFAULT_OFFSET_LAG_MAX: Final = default_of("offset.lag.max", int)
# MM2's MAX_OUTSTANDING_OFFSET_SYNCS: keeps a slow syncs topic from piling up sends.
MAX_IN_FLIGHT_SYNCS: Final = 10
# Pending syncs kept per partition while no permit frees: a burst of acknowledgements (one poll, one
# committed transaction) makes up to its size / (offset.lag.max + 1) of them; the cap bounds memory
# (about 40 KB per partition) when the syncs topic is unreachable.
MAX_PENDING_PER_PARTITION: Final = 256


class QueuedOffsetSync(NamedTuple):
    """An offset sync waiting in, or dispatched from, the writer's queue."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int


DeliveryCallback = Callable[[BaseException | None], None]
SyncSender = Callable[[QueuedOffsetSync, DeliveryCallback], None]


@dataclass
class PartitionState:
    """Per source partition bookkeeping deciding when a sync is due."""

    offset_lag_max: int
    previous_upstream: int = field(default=-1, init=False)
    previous_downstream: int = field(default=-1, init=False)
    last_sync_downstream: int = field(default=-1, init=False)
    sync_due: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.offset_lag_max < 0:
            raise ValueError(f"offset.lag.max must be >= 0, got {self.offset_lag_max}")

    def update(self, upstream_offset: int, downstream_offset: int) -> bool:
        """Record one replicated record; True while a sync is due (until `reset`)."""
        if self._needs_sync(upstream_offset, downstream_offset):
            self.last_sync_downstream = downstream_offset
            self.sync_due = True
        self.previous_upstream = upstream_offset
        self.previous_downstream = downstream_offset
        return self.sync_due

    def reset(self) -> None:
        """Acknowledge that the due sync was queued."""
        self.sync_due = False

    def _needs_sync(self, upstream_offset: int, downstream_offset: int) -> bool:
        first_this_lifetime = self.last_sync_downstream == -1
        # Translation answers at most last sync + 1, so staleness counts from there.
        too_stale = downstream_offset - (self.last_sync_downstream + 1) >= self.offset_lag_max
        # Compaction, transaction markers or filtered records: +1 would be wrong.
        upstream_gap = upstream_offset - self.previous_upstream != 1
        target_truncated = downstream_offset < self.previous_downstream
        return first_this_lifetime or too_stale or upstream_gap or target_truncated


class _Queued:
    """A pending sync; `sync` is replaced in place when a newer one makes it redundant."""

    __slots__ = ("sync",)

    def __init__(self, sync: QueuedOffsetSync) -> None:
        self.sync = sync


@dataclass(slots=True)
class _PartitionLine:
    """What the queue remembers of one partition's syncs, to thin them without loosening the bound."""

    newest: _Queued | None = None  # the partition's newest pending sync, while it is unsent
    before_newest: int | None = None  # downstream offset of the sync queued (or sent) before `newest`
    last_downstream: int | None = None  # downstream offset of the newest sync queued or sent
    pending: int = 0


class OffsetSyncQueue:
    """Pending syncs in arrival order, delayed ones (latest per partition), and the in-flight bound.

    Every due sync is kept and sent in order, as soon as one of the permits is free: when it is queued,
    and again whenever a delivery report returns a permit. MM2 keeps only the newest pending sync per
    partition, so under a burst of acknowledgements (one producer poll, one committed transaction) it
    loses the syncs in between, the first one included, and translation for lagging groups falls far
    behind. We drop a pending sync only when it is redundant: the sync queued before it and the new one
    are at most `offset.lag.max` + 1 downstream offsets apart, so translating through the earlier one
    still re-reads at most `offset.lag.max` records. Past `MAX_PENDING_PER_PARTITION` pending syncs
    (the syncs topic is unreachable) the newest is overwritten as MM2 does, and counted.

    Delayed syncs wait for `promote_delayed`, so a low-volume partition is not left up to
    `offset.lag.max` behind forever (MM2 KAFKA-15906). A `send` that raises gets its permit back and its
    sync returns to the head of the queue. Delivery callbacks may arrive on another thread, hence the lock.
    """

    def __init__(self, send: SyncSender, max_in_flight: int = MAX_IN_FLIGHT_SYNCS,
                 offset_lag_max: int = DEFAULT_OFFSET_LAG_MAX) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._send = send
        self._max_in_flight = max_in_flight
        self._spacing = offset_lag_max + 1
        self._in_flight = 0
        self._pending: deque[_Queued] = deque()
        self._lines: dict[tuple[str, int], _PartitionLine] = {}
        self._delayed: dict[tuple[str, int], QueuedOffsetSync] = {}
        self._lock = threading.Lock()
        self._firing = threading.local()
        self.thinned = 0  # pending syncs replaced by a newer one that keeps the bound
        self.coalesced = 0  # pending syncs overwritten past the per-partition cap (MM2's rule)

    @property
    def in_flight(self) -> int:
        """Syncs handed to `send` whose completion has not been reported yet."""
        with self._lock:
            return self._in_flight

    @property
    def saturated(self) -> bool:
        """True when syncs wait and every permit is taken."""
        with self._lock:
            return bool(self._pending) and self._in_flight >= self._max_in_flight

    def pending(self) -> tuple[QueuedOffsetSync, ...]:
        """Syncs that `fire_pending` will send, in send order."""
        with self._lock:
            return tuple(queued.sync for queued in self._pending)

    def delayed(self) -> tuple[QueuedOffsetSync, ...]:
        """Syncs waiting for the next `promote_delayed`."""
        with self._lock:
            return tuple(self._delayed.values())

    def queue_now(self, sync: QueuedOffsetSync) -> None:
        """Queue a due sync behind the others; it supersedes the delayed one of its partition."""
        with self._lock:
            self._delayed.pop((sync.topic, sync.partition), None)
            self._enqueue(sync)

    def queue_later(self, sync: QueuedOffsetSync) -> None:
        """Keep a not-yet-due sync as the partition's latest position."""
        with self._lock:
            self._delayed[(sync.topic, sync.partition)] = sync

    def promote_delayed(self) -> None:
        """Queue every delayed sync behind the pending ones (periodic flush)."""
        with self._lock:
            for sync in self._delayed.values():
                self._enqueue(sync)
            self._delayed.clear()

    def forget(self, keys: Iterable[tuple[str, int]]) -> None:
        """Drop the thinning memory of partitions with nothing pending (they left this worker)."""
        with self._lock:
            for key in keys:
                line = self._lines.get(key)
                if line is not None and line.pending == 0:
                    del self._lines[key]

    def fire_pending(self) -> int:
        """Send pending syncs while permits last; returns how many were sent."""
        sent = 0
        self._firing.active = True
        try:
            while (queued := self._take_next()) is not None:
                self._dispatch(queued)
                sent += 1
        finally:
            self._firing.active = False
        return sent

    def _enqueue(self, sync: QueuedOffsetSync) -> None:
        key = (sync.topic, sync.partition)
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _PartitionLine()
        newest = line.newest
        if newest is not None and self._redundant(line, newest.sync, sync):
            newest.sync = sync
            self.thinned += 1
        elif newest is not None and line.pending >= MAX_PENDING_PER_PARTITION:
            newest.sync = sync
            self.coalesced += 1
            LOG.debug("%d offset syncs of %s[%d] pending; newest overwritten", line.pending, *key)
        else:
            queued = _Queued(sync)
            self._pending.append(queued)
            line.newest, line.before_newest = queued, line.last_downstream
            line.pending += 1
        line.last_downstream = sync.downstream_offset

    def _redundant(self, line: _PartitionLine, newest: QueuedOffsetSync, sync: QueuedOffsetSync) -> bool:
        """True when `newest` (unsent) adds nothing to the bound once `sync` follows it."""
        if line.before_newest is None:
            return False  # the first sync of a partition is always kept
        forward = (sync.upstream_offset > newest.upstream_offset
                   and sync.downstream_offset >= newest.downstream_offset >= line.before_newest)
        return forward and sync.downstream_offset - line.before_newest <= self._spacing

    def _take_next(self) -> _Queued | None:
        with self._lock:
            if not self._pending:
                return None
            if self._in_flight >= self._max_in_flight:
                LOG.debug("%d offset syncs in flight; sending the rest when a permit frees", self._in_flight)
                return None
            queued = self._pending.popleft()
            line = self._lines[(queued.sync.topic, queued.sync.partition)]
            line.pending -= 1
            if line.newest is queued:
                line.newest = None  # sent: no longer replaceable
            self._in_flight += 1
            return queued

    def _dispatch(self, queued: _Queued) -> None:
        on_complete = self._completion_for(queued.sync)
        try:
            self._send(queued.sync, on_complete)
        except BaseException:
            # E.g. the producer's local queue is full: the sync was never handed
            # over, so it keeps its place for the next attempt and its permit.
            on_complete(None)
            self._requeue(queued)
            raise

    def _requeue(self, queued: _Queued) -> None:
        with self._lock:
            self._pending.appendleft(queued)
            line = self._lines.setdefault((queued.sync.topic, queued.sync.partition), _PartitionLine())
            line.pending += 1

    def _completion_for(self, sync: QueuedOffsetSync) -> DeliveryCallback:
        released = False

        def on_complete(error: BaseException | None) -> None:
            nonlocal released
            with self._lock:
                if released:
                    LOG.warning("duplicate completion for offset sync %s", sync)
                    return
                released = True
                self._in_flight -= 1
                refill = bool(self._pending)
            if error is not None:
                LOG.error("failed to send offset sync %s: %s", sync, error)
            if refill and not getattr(self._firing, "active", False):
                self._refill()

        return on_complete

    def _refill(self) -> None:
        """A permit came back: send the next pending sync now, not on the next tick."""
        try:
            self.fire_pending()
        except BufferError:  # the producer's queue is full: the sync stays at the head
            LOG.debug("offset-syncs producer queue full; the next permit or tick retries")


class OffsetSyncWriter:
    """Decides per record whether an offset sync is due and queues it."""

    def __init__(
        self,
        send: SyncSender,
        offset_lag_max: int = DEFAULT_OFFSET_LAG_MAX,
        max_in_flight: int = MAX_IN_FLIGHT_SYNCS,
    ) -> None:
        if offset_lag_max < 0:
            raise ValueError(f"offset.lag.max must be >= 0, got {offset_lag_max}")
        self.queue = OffsetSyncQueue(send, max_in_flight, offset_lag_max)
        self._offset_lag_max = offset_lag_max
        self._states: dict[tuple[str, int], PartitionState] = {}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """State of a source partition, None before its first record."""
        return self._states.get((topic, partition))

    def forget(self, keys: Iterable[tuple[str, int]]) -> None:
        """The partitions left this worker: their next record starts a new lifetime, with a sync due
        (MM2 builds a new writer per task). Syncs already queued stay: they are true positions."""
        keys = list(keys)
        for key in keys:
            self._states.pop(key, None)
        self.queue.forget(keys)

    def maybe_queue(self, topic: str, partition: int, upstream_offset: int, downstream_offset: int) -> bool:
        """Queue the record's sync now if due, else delay it; True when due."""
        key = (topic, partition)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = PartitionState(self._offset_lag_max)
        sync = QueuedOffsetSync(topic, partition, upstream_offset, downstream_offset)
        if state.update(upstream_offset, downstream_offset):
            self.queue.queue_now(sync)
            state.reset()
            return True
        self.queue.queue_later(sync)
        return False

    def on_record_committed(
        self, topic: str, partition: int, upstream_offset: int, downstream_offset: int
    ) -> None:
        """The target acknowledged a record (MM2 commitRecord)."""
        self.maybe_queue(topic, partition, upstream_offset, downstream_offset)
        self.queue.fire_pending()

    def on_offsets_flushed(self) -> None:
        """Periodic flush: send every partition's latest position (MM2 commit)."""
        self.queue.promote_delayed()
        self.queue.fire_pending()
