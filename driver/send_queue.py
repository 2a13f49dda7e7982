"""What the replication has handed to the target and not had acknowledged, and what waits for room.

The driver's memory during a target outage is bounded here, not by librdkafka's defaults (1 GiB of
queue per producer): a copied record goes to the producer only while fewer than
``replication.queue.max.records`` records and ``replication.queue.max.bytes`` bytes wait for the
target. A record that does not fit waits in its partition's backlog, and the worker pauses that source
partition, so the consumer stays in its group (it keeps polling) while nothing more is fetched. The
backlog is retried on every tick, in order; a partition whose backlog is sent is resumed.

librdkafka's own queue is set a little larger than these limits (``producer_limits``): the progress and
metrics records that share the producer always fit, so they never meet a full queue.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Message

from contract.config import SrmConfig
from contract.settings import default_of

# Room above the replicated records' limits for progress, metrics and offset-sync records.
HEADROOM_RECORDS: Final = 10_000
HEADROOM_BYTES: Final = 8 * 1024 * 1024
# How long librdkafka waits before fetching again for a partition once the fetch queue above is full.
# Its default (1 s) idles the copy: the loop empties a 16 MiB queue in well under a second at full
# speed, then waits out the rest of the second (bench/RESULTS.md, "FETCH_QUEUE_BACKOFF_MS").
FETCH_QUEUE_BACKOFF_MS: Final = 50
# A target that acknowledges nothing for this long while records wait is reported as an outage.
OUTAGE_AFTER_S: Final = 10.0

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class QueueLimits:
    max_records: int
    max_bytes: int
    fetch_max_bytes: int

    @classmethod
    def from_config(cls, config: SrmConfig, source: str, target: str) -> QueueLimits:
        values = {key: config.setting(f"replication.{key}", source, target)
                  for key in ("queue.max.records", "queue.max.bytes", "fetch.queue.max.bytes")}
        for key, minimum in (("queue.max.records", 1), ("queue.max.bytes", 1024),
                             ("fetch.queue.max.bytes", 1_048_576)):
            if values[key] < minimum:
                raise config.config_error(f"replication.{key}", f"must be at least {minimum}, "
                                                                f"got {values[key]}")
        return cls(values["queue.max.records"], values["queue.max.bytes"], values["fetch.queue.max.bytes"])

    @classmethod
    def defaults(cls) -> QueueLimits:
        """The settings table's defaults (for writers built without a configuration, in tests)."""
        return cls(*(default_of(f"replication.{key}", int)
                     for key in ("queue.max.records", "queue.max.bytes", "fetch.queue.max.bytes")))

    def producer_limits(self) -> dict[str, object]:
        """librdkafka's hard queue limits of the replication producer: ours plus headroom."""
        return {"queue.buffering.max.messages": self.max_records + HEADROOM_RECORDS,
                "queue.buffering.max.kbytes": (self.max_bytes + HEADROOM_BYTES) // 1024}

    def consumer_limits(self) -> dict[str, object]:
        """The source consumer's prefetch: one fetch response at most fills it; once full, fetching
        starts again soon after the loop takes records from it."""
        return {"queued.max.messages.kbytes": self.fetch_max_bytes // 1024,
                "fetch.max.bytes": self.fetch_max_bytes,
                "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS}


class SendQueue:
    """Counts of records handed to the producer and not acknowledged, and the per-partition backlog."""

    def __init__(self, limits: QueueLimits) -> None:
        self.limits = limits
        self.records = 0
        self.bytes = 0
        self.backlog: dict[PartitionKey, deque[Message]] = {}
        self._last_ack = time.monotonic()
        self._waiting_since: float | None = None  # since when records wait with no acknowledgement
        self._settled = self._settled_seen = 0  # records acknowledged or refused, and as of the last note

    def has_room(self, size: int) -> bool:
        """An empty queue takes any record, so one record larger than the byte limit still moves."""
        if self.records == 0:
            return True
        return self.records < self.limits.max_records and self.bytes + size <= self.limits.max_bytes

    def sent(self, size: int, records: int = 1) -> None:
        if self.records == 0:
            self._waiting_since = time.monotonic()
        self.records += records
        self.bytes += size

    def settled(self, size: int, records: int = 1) -> None:
        """Records were acknowledged or refused: they no longer take room. Called from the delivery
        callbacks, so it reads no clock: `note_acknowledgements` does, once per poll."""
        self.records -= records
        self.bytes -= size
        self._settled += records
        if self.records <= 0:
            self._waiting_since = None

    def note_acknowledgements(self, now: float) -> None:
        """After the producers' poll: when the target last acknowledged something, for the outage watch."""
        if self._settled != self._settled_seen:
            self._settled_seen, self._last_ack = self._settled, now
        if self.records <= 0:
            self.records, self.bytes, self._waiting_since = 0, max(0, self.bytes), None

    def hold(self, key: PartitionKey, messages: Iterable[Message]) -> None:
        """Records that wait, in order, behind what already waits for their partition."""
        self.backlog.setdefault(key, deque()).extend(messages)

    def held(self, key: PartitionKey) -> bool:
        return key in self.backlog

    def drop(self, keys: Iterable[PartitionKey]) -> None:
        """Partitions leaving this worker: their backlog is replayed by the next owner from progress."""
        for key in keys:
            self.backlog.pop(key, None)

    def held_records(self) -> int:
        return sum(len(messages) for messages in self.backlog.values())

    def unacknowledged_for(self, now: float | None = None) -> float:
        """Seconds the target has acknowledged nothing while records waited (0 when none wait)."""
        if self._waiting_since is None:
            return 0.0
        now = time.monotonic() if now is None else now
        return now - max(self._waiting_since, self._last_ack)

    def outage(self, target: str, now: float | None = None) -> str | None:
        """The reason to report while the target takes nothing in, else None."""
        silent_s = self.unacknowledged_for(now)
        if silent_s < OUTAGE_AFTER_S:
            return None
        paused = f"; {len(self.backlog)} source partition(s) paused" if self.backlog else ""
        return (f"target cluster {target!r} acknowledged nothing for {silent_s:.0f} s: {self.records} "
                f"records ({self.bytes / 1_048_576:.1f} MiB) wait for it{paused}")
