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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from contract.settings import SETTINGS

LOG = logging.getLogger(__name__)

DEFAULT_OFFSET_LAG_MAX: Final[int] = SETTINGS["offset.lag.max"].default  # type: ignore[assignment]
# MM2's MAX_OUTSTANDING_OFFSET_SYNCS: keeps a slow syncs topic from piling up sends.
MAX_IN_FLIGHT_SYNCS: Final = 10


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


class OffsetSyncQueue:
    """Pending and delayed syncs (latest per partition) and the in-flight bound.

    Pending syncs go out as soon as a permit is free; delayed ones wait for
    `promote_delayed`, so a low-volume partition is not left up to
    `offset.lag.max` behind forever (MM2 KAFKA-15906). A `send` that raises
    gets its permit back and its sync returns to the head of the queue. Delivery
    callbacks may arrive on another thread, hence the lock.
    """

    def __init__(self, send: SyncSender, max_in_flight: int = MAX_IN_FLIGHT_SYNCS):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self._send = send
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._pending: dict[tuple[str, int], QueuedOffsetSync] = {}
        self._delayed: dict[tuple[str, int], QueuedOffsetSync] = {}
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        """Syncs handed to `send` whose completion has not been reported yet."""
        with self._lock:
            return self._in_flight

    def pending(self) -> tuple[QueuedOffsetSync, ...]:
        """Syncs that will be sent by the next `fire_pending`, in send order."""
        with self._lock:
            return tuple(self._pending.values())

    def delayed(self) -> tuple[QueuedOffsetSync, ...]:
        """Syncs waiting for the next `promote_delayed`."""
        with self._lock:
            return tuple(self._delayed.values())

    def queue_now(self, sync: QueuedOffsetSync) -> None:
        """Queue a due sync; it supersedes any delayed one of its partition."""
        key = (sync.topic, sync.partition)
        with self._lock:
            self._delayed.pop(key, None)
            self._pending[key] = sync

    def queue_later(self, sync: QueuedOffsetSync) -> None:
        """Keep a not-yet-due sync as the partition's latest position."""
        with self._lock:
            self._delayed[(sync.topic, sync.partition)] = sync

    def promote_delayed(self) -> None:
        """Make every delayed sync pending (periodic flush)."""
        with self._lock:
            self._pending.update(self._delayed)
            self._delayed.clear()

    def fire_pending(self) -> int:
        """Send pending syncs while permits last; returns how many were sent."""
        sent = 0
        while (sync := self._take_next()) is not None:
            self._dispatch(sync)
            sent += 1
        return sent

    def _take_next(self) -> QueuedOffsetSync | None:
        with self._lock:
            if not self._pending:
                return None
            if self._in_flight >= self._max_in_flight:
                LOG.debug("%d offset syncs in flight; sending the rest later", self._in_flight)
                return None
            key = next(iter(self._pending))
            self._in_flight += 1
            return self._pending.pop(key)

    def _dispatch(self, sync: QueuedOffsetSync) -> None:
        on_complete = self._completion_for(sync)
        try:
            self._send(sync, on_complete)
        except BaseException:
            # E.g. the producer's local queue is full: the sync was never handed
            # over, so it keeps its place for the next attempt and its permit.
            on_complete(None)
            self._requeue(sync)
            raise

    def _requeue(self, sync: QueuedOffsetSync) -> None:
        key = (sync.topic, sync.partition)
        with self._lock:
            if key not in self._pending:  # a newer sync of the partition wins
                self._pending = {key: sync, **self._pending}

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
            if error is not None:
                LOG.error("failed to send offset sync %s: %s", sync, error)

        return on_complete


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
        self.queue = OffsetSyncQueue(send, max_in_flight)
        self._offset_lag_max = offset_lag_max
        self._states: dict[tuple[str, int], PartitionState] = {}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """State of a source partition, None before its first record."""
        return self._states.get((topic, partition))

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
