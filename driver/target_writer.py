"""Writes polled source records to the target with their progress: at-least-once or exactly-once.

Both writers copy a record as bytes (key, value, headers, timestamp) to the same partition of the
remote topic, and record progress in the MM2 Connect format (`driver.progress_record`).

- `AtLeastOnceWriter`: one idempotent producer. Progress only ever names records the target
  acknowledged, written every flush interval and when partitions are revoked, so a crash replays at
  most one interval (MM2 flushes every 60 s; we flush every second to keep replays short).
- `TransactionalWriter` (`exactly.once = true`, `driver.transactional_writer`): one transactional
  producer per task (`driver.replication_tasks`), records and progress of all the task's partitions in
  one transaction.

Offset syncs follow MM2: fed acknowledged records (committed ones in exactly-once mode), best-effort.

Neither writer waits for room in the producer's queue: a record that does not fit
(`driver.send_queue`) waits in its partition's backlog, the worker pauses that partition, and `tick`
sends the backlog as acknowledgements free room. A target outage thus stops the copy without stopping
the worker's loop (it keeps polling, so it stays in its group, and keeps reporting).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.progress_record import SourcePartition, encode_key, encode_value
from driver.replication_stats import PartitionStats
from driver.send_queue import QueueLimits, SendQueue, record_size

LOG = logging.getLogger(__name__)

PROGRESS_FLUSH_INTERVAL_S: Final = 1.0
TRANSACTION_INTERVAL_S: Final = 0.25
TRANSACTION_TIMEOUT_S: Final = 30.0
FLUSH_TIMEOUT_S: Final = 60.0
# Flushes when the process stops: within the driver's stop deadline (driver.__main__). What is not
# acknowledged by then is not recorded as progress, so the next owner replays it.
SHUTDOWN_FLUSH_S: Final = 5.0
PARTITION_WAIT_S: Final = 30.0


class DeliveryFailed(RuntimeError):
    """The target refused a replicated record; the worker fails rather than skip it."""


@dataclass(eq=False)
class PartitionFlow:
    """One assigned source partition and where its replication stands."""

    topic: str
    partition: int
    remote: str
    stats: PartitionStats
    acked: int = -1  # last upstream offset the target acknowledged (committed, in exactly-once mode)
    persisted: int = -1  # last upstream offset written to the progress topic
    in_flight: deque[int] = field(default_factory=deque)  # upstream offsets produced, not acknowledged
    produced: int = -1  # last upstream offset handed to the producer
    pending_syncs: list[tuple[int, int]] = field(default_factory=list)  # acked inside the open transaction
    task: int = 0  # the task copying it (driver.replication_tasks)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition


def _record_timestamp(message: Message) -> int:
    kind, ts = message.timestamp()
    return ts if kind != 0 and ts >= 0 else 0  # 0: let the producer stamp a record without one


class _WriterBase:
    def __init__(self, source: str, progress_topic: str, emitter: OffsetSyncEmitter | None,
                 limits: QueueLimits | None) -> None:
        self.source, self.progress_topic, self.emitter = source, progress_topic, emitter
        self.flows: dict[tuple[str, int], PartitionFlow] = {}
        self.queue = SendQueue(limits or QueueLimits.defaults())
        self._failure: str | None = None

    def write(self, messages: list[Message]) -> None:
        """Hands polled records to the producer, in order per partition; what does not fit is held.

        The hot path of the copy: a batch holds runs of one partition's records, so the partition's
        flow is looked up once a run, and each record's timestamp, key and value are read once."""
        flows, backlog, send = self.flows, self.queue.backlog, self._send
        now_ms = time.time() * 1000
        last_key: tuple[str, int] | None = None
        flow: PartitionFlow | None = None
        for message in messages:
            if message.error() is not None:
                _consume_error(message)
                continue
            key = (message.topic(), message.partition())
            if key != last_key:
                last_key, flow = key, flows.get(key)
            if flow is None:  # revoked while the batch was in flight
                continue
            kind, ts = message.timestamp()
            if kind == 0 or ts < 0:
                ts = 0  # 0: let the producer stamp a record without one
            flow.stats.polled(now_ms - ts if ts else 0.0)  # MM2 measures record age at poll time
            if key in backlog or not send(flow, message, ts):
                self.queue.hold(key, message)

    def paused(self) -> set[tuple[str, int]]:
        """Partitions whose records wait for room: the worker pauses them at the source."""
        return set(self.queue.backlog)

    def _send_backlog(self) -> None:
        for key, waiting in list(self.queue.backlog.items()):
            flow = self.flows.get(key)
            while flow is not None and waiting and self._send(flow, waiting[0],
                                                              _record_timestamp(waiting[0])):
                waiting.popleft()
            if flow is None or not waiting:
                del self.queue.backlog[key]

    def _send(self, flow: PartitionFlow, message: Message, ts: int) -> bool:
        """Hands one record to the producer; False when there is no room for it now."""
        value, key, queue = message.value(), message.key(), self.queue
        size = (len(value) if value else 0) + (len(key) if key else 0)
        if queue.records and (queue.records >= queue.limits.max_records
                              or queue.bytes + size > queue.limits.max_bytes):
            return False  # (an empty queue takes any record: one larger than the byte limit still moves)
        try:
            self._produce(flow, message, value, key, ts)
        except BufferError:  # librdkafka's own limit (a client property set lower than ours)
            return False
        queue.sent(size)
        offset = message.offset()
        flow.in_flight.append(offset)
        flow.produced = offset
        return True

    def _produce(self, flow: PartitionFlow, message: Message, value: bytes | None, key: bytes | None,
                 ts: int) -> None:
        raise NotImplementedError

    def retire(self, tasks: Iterable[int]) -> None:
        """Tasks this worker no longer owns, their partitions released: nothing held per task here."""

    def _check(self) -> None:
        if self._failure is not None:
            raise DeliveryFailed(self._failure)

    def _progress_record(self, flow: PartitionFlow, offset: int) -> tuple[bytes, bytes]:
        return encode_key(SourcePartition(self.source, flow.topic, flow.partition)), encode_value(offset)

    def _feed_sync(self, flow: PartitionFlow, upstream: int, downstream: int) -> None:
        if self.emitter is not None:
            self.emitter.acknowledged(flow.topic, flow.partition, upstream, downstream)


class AtLeastOnceWriter(_WriterBase):
    def __init__(self, producer: Producer, source: str, progress_topic: str,
                 emitter: OffsetSyncEmitter | None, limits: QueueLimits | None = None) -> None:
        super().__init__(source, progress_topic, emitter, limits)
        self.producer = producer
        self._by_remote: dict[tuple[str, int], PartitionFlow] = {}
        self._next_flush = time.monotonic() + PROGRESS_FLUSH_INTERVAL_S
        self._now_ms = time.time() * 1000  # the delivery callbacks' clock, read before each poll

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        """The producers' one delivery callback (bound once: no per-record closure). Called for every
        record, from the producers' poll and flush on the copy loop's thread: the clock is read once per
        poll (`_now_ms`), not once a record."""
        flow = self._by_remote.get((message.topic(), message.partition()))
        if error is not None:
            if flow is not None:
                self.queue.settled(record_size(message))
            self._failure = f"delivery to {message.topic()}[{message.partition()}] failed: {error}"
            return
        if flow is None:  # progress or metrics record
            return
        value, key = message.value(), message.key()
        value_size = len(value) if value else 0
        self.queue.settled(value_size + (len(key) if key else 0))
        upstream = flow.in_flight.popleft()
        downstream = message.offset()
        flow.acked = upstream
        flow.stats.replicated(upstream, downstream, value_size, self._now_ms - message.timestamp()[1])
        if self.emitter is not None:
            self.emitter.acknowledged(flow.topic, flow.partition, upstream, downstream)

    def add(self, flows: Iterable[PartitionFlow]) -> None:
        for flow in flows:
            self.flows[flow.key] = flow
            self._by_remote[(flow.remote, flow.partition)] = flow

    def _produce(self, flow: PartitionFlow, message: Message, value: bytes | None, key: bytes | None,
                 ts: int) -> None:
        _produce(self.producer, flow, message, value, key, ts)

    def tick(self, now: float) -> None:
        self._now_ms = time.time() * 1000
        self.producer.poll(0)
        self.queue.note_acknowledgements(now)
        self._check()
        self._send_backlog()
        if self.emitter is not None:
            self.emitter.send_due()
        if now >= self._next_flush:
            self._persist(self.flows.values())
            if self.emitter is not None:
                self.emitter.flush_delayed()
            self._next_flush = now + PROGRESS_FLUSH_INTERVAL_S

    def release(self, keys: Iterable[tuple[str, int]], lost: bool = False,
                timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Stop writing partitions: wait for their records, then record their final progress."""
        flows = [self.flows[k] for k in keys if k in self.flows]
        if not flows:
            return
        deadline = time.monotonic() + timeout_s
        self._flush(timeout_s)
        if not lost:  # a lost partition may already be owned elsewhere: never rewind its progress
            self._persist(flows)
            self._flush(max(0.1, deadline - time.monotonic()))
        for flow in flows:
            del self.flows[flow.key]
            self._by_remote.pop((flow.remote, flow.partition), None)
        self.queue.drop(flow.key for flow in flows)

    def _persist(self, flows: Iterable[PartitionFlow]) -> None:
        for flow in flows:
            if flow.acked > flow.persisted:
                key, value = self._progress_record(flow, flow.acked)
                self.producer.produce(self.progress_topic, value, key)
                flow.persisted = flow.acked

    def _flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        self._now_ms = time.time() * 1000
        if self.producer.flush(timeout_s) > 0:
            raise DeliveryFailed(f"records not acknowledged by the target within {timeout_s:.0f} s")
        self.queue.note_acknowledgements(time.monotonic())
        self._check()


def _produce(producer: Producer, flow: PartitionFlow, message: Message, value: bytes | None,
             key: bytes | None, ts: int) -> None:
    """Copies one record; BufferError when librdkafka's queue is full. A remote partition just created
    that the producer's metadata does not show yet is waited for (bounded)."""
    deadline = None  # set on the first unknown partition: no clock read per record on the hot path
    while True:
        try:
            producer.produce(flow.remote, value, key, flow.partition, timestamp=ts, headers=message.headers())
            return
        except KafkaException as exc:
            deadline = deadline or time.monotonic() + PARTITION_WAIT_S
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
            producer.list_topics(flow.remote, timeout=5)  # refreshes the producer's metadata
            producer.poll(0.2)


def _consume_error(message: Message) -> None:
    error = message.error()
    if error.code() == KafkaError._PARTITION_EOF:
        return
    if error.fatal():
        raise KafkaException(error)
    LOG.warning("consume error on %s[%s]: %s", message.topic(), message.partition(), error)
