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

Records go out in runs (`CopiedRun`): a partition's records of one poll at consecutive offsets. Only a
run's first and last record carry a delivery callback; the records between are acknowledged with the
last one. That holds because nothing between them can fail while the last one succeeds: exactly-once
commits a task's records all or none, and the at-least-once producer has librdkafka's gapless
guarantee (a failure that would leave a gap fails the producer, and so every later record) and no
message timeout (`AT_LEAST_ONCE_PRODUCER`; the worker fails instead when the target acknowledges
nothing for `DELIVERY_TIMEOUT_S`). A delivery report costs a Python object and call per record: at 8
partitions they were a quarter of the copy loop's time. The first and last records' target offsets
give every record's (contiguous downstream), so offset syncs and the latency summary stay as exact as
per-record reports made them.

Neither writer waits for room in the producer's queue: a record that does not fit
(`driver.send_queue`) waits in its partition's backlog, the worker pauses that partition, and `tick`
sends the backlog as acknowledgements free room. A target outage thus stops the copy without stopping
the worker's loop (it keeps polling, so it stays in its group, and keeps reporting).
"""

from __future__ import annotations

import functools
import itertools
import logging
import operator
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from driver.copy_producers import CopyProducers
from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.progress_record import SourcePartition, encode_key, encode_value
from driver.replication_stats import PartitionStats
from driver.send_queue import QueueLimits, SendQueue

if TYPE_CHECKING:
    from confluent_kafka._types import HeadersType

LOG = logging.getLogger(__name__)

PROGRESS_FLUSH_INTERVAL_S: Final = 1.0
TRANSACTION_INTERVAL_S: Final = 0.25
TRANSACTION_TIMEOUT_S: Final = 30.0
FLUSH_TIMEOUT_S: Final = 60.0
# Flushes when the process stops: within the driver's stop deadline (driver.__main__). What is not
# acknowledged by then is not recorded as progress, so the next owner replays it.
SHUTDOWN_FLUSH_S: Final = 5.0
PARTITION_WAIT_S: Final = 30.0
# The at-least-once producer never drops a record by itself (no message timeout, see the module's
# docstring); a record not acknowledged this long after it was produced fails the worker, which starts
# again from its recorded progress, as librdkafka's default message timeout did.
DELIVERY_TIMEOUT_S: Final = 300.0
DELIVERY_CHECK_S: Final = 1.0
AT_LEAST_ONCE_PRODUCER: Final = {"enable.idempotence": True, "enable.gapless.guarantee": True,
                                  "message.timeout.ms": 0}
# librdkafka's queue is sized above the send queue's limits, so this is not expected; if it happens in
# the middle of a run, the run waits this long for room.
BUFFER_WAIT_S: Final = 30.0


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
    in_flight: deque[CopiedRun] = field(default_factory=deque)  # produced, not acknowledged, in order
    produced: int = -1  # last upstream offset handed to the producer
    pending_syncs: list[CopiedRun] = field(default_factory=list)  # acked inside the open transaction
    task: int = 0  # the task copying it (driver.replication_tasks)
    lane: int = 0  # at least once: which of the worker's producers carries it (driver.copy_producers)
    key: tuple[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.key = (self.topic, self.partition)


class CopiedRun:
    """Records of one partition handed to the producer together, at consecutive upstream offsets."""

    __slots__ = ("flow", "first", "last", "size", "value_bytes", "sent_ms", "stamp_sum", "stamp_min",
                 "stamp_max", "stamp_last", "first_downstream", "last_downstream")

    def __init__(self, flow: PartitionFlow, first: int, last: int, size: int, value_bytes: int,
                 sent_ms: float, stamps: list[float]) -> None:
        self.flow, self.first, self.last = flow, first, last  # upstream offsets of its first and last record
        self.size, self.value_bytes = size, value_bytes  # keys and values (the send queue's); values (MM2's)
        self.sent_ms = sent_ms  # when it was handed to the producer
        # The records' timestamps (the time of the write for a record without one), summed up: the
        # latency summary of the whole run follows from them and the acknowledgement's time.
        self.stamp_sum, self.stamp_min, self.stamp_max = sum(stamps), min(stamps), max(stamps)
        self.stamp_last = stamps[-1]
        self.first_downstream = self.last_downstream = -1  # from the delivery reports

    def acknowledged(self, ack_ms: float) -> None:
        """Counts the run into its partition's statistics, acknowledged at ``ack_ms``."""
        count = self.last - self.first + 1
        self.flow.stats.replicated_run(self.last, self.last_downstream, count, self.value_bytes,
                                       count * ack_ms - self.stamp_sum, ack_ms - self.stamp_max,
                                       ack_ms - self.stamp_min, ack_ms - self.stamp_last)


class _WriterBase:
    def __init__(self, source: str, progress_topic: str, emitter: OffsetSyncEmitter | None,
                 limits: QueueLimits | None) -> None:
        self.source, self.progress_topic, self.emitter = source, progress_topic, emitter
        self.flows: dict[tuple[str, int], PartitionFlow] = {}
        self.queue = SendQueue(limits or QueueLimits.defaults())
        self._failure: str | None = None
        self._now_ms = time.time() * 1000  # the delivery callbacks' clock, read before each poll

    def write(self, messages: list[Message]) -> None:
        """Hands polled records to the producer, in order per partition; what does not fit is held.

        The hot path of the copy: the batch is cut into runs (a partition's records at consecutive
        offsets), each looked up, accounted and acknowledged once. A record's accessors are read in
        list comprehensions, not one by one in a loop: at 8 partitions the loop's own bytecode per
        record was as much as the producer's C."""
        errors = [message.error() for message in messages]
        if any(errors):  # (not errors.count(None): a KafkaError compared with None leaves an exception set)
            for message, error in zip(messages, errors, strict=True):
                if error is not None:
                    _consume_error(message)
            messages = [message for message, error in zip(messages, errors, strict=True) if error is None]
        count = len(messages)
        if not count:
            return
        flows, backlog = self.flows, self.queue.backlog
        now_ms = time.time() * 1000
        # Along a run, offset - position is constant: a run is a group of equal (topic, partition, that).
        shifts = [message.offset() for message in messages]
        shifts = list(map(operator.sub, shifts, range(count)))
        groups = itertools.groupby(zip([message.topic() for message in messages],
                                       [message.partition() for message in messages], shifts, strict=True))
        i = 0
        for (topic, partition, _), members in groups:
            j = i + len(list(members))
            key = cast("tuple[str, int]", (topic, partition))  # a record has both (the stubs: Optional)
            flow = flows.get(key)
            if flow is not None:  # else revoked while the batch was in flight
                if j == i + 1 and key not in backlog:  # a run of one: at low rates most are
                    if not self._send_one(flow, messages[i], now_ms, True):
                        self.queue.hold(key, [messages[i]])
                    i = j
                    continue
                run = messages[i:j] if i or j < count else messages
                if key in backlog:
                    _note_polled(flow, run, now_ms)
                    backlog[key].extend(run)
                else:
                    taken = self._send_run(flow, run, now_ms, True)
                    if taken < len(run):
                        self.queue.hold(key, run[taken:])
            i = j

    def paused(self) -> set[tuple[str, int]]:
        """Partitions whose records wait for room: the worker pauses them at the source."""
        return set(self.queue.backlog)

    def _send_backlog(self) -> None:
        now_ms = time.time() * 1000
        for key, waiting in list(self.queue.backlog.items()):
            flow = self.flows.get(key)
            while flow is not None and waiting:
                run = [waiting[0]]
                for message in itertools.islice(waiting, 1, None):  # the next run: consecutive offsets
                    if message.offset() != cast(int, run[-1].offset()) + 1:
                        break
                    run.append(message)
                taken = self._send_run(flow, run, now_ms, False)
                for _ in range(taken):
                    waiting.popleft()
                if taken < len(run):
                    break
            if flow is None or not waiting:
                del self.queue.backlog[key]

    def _send_run(self, flow: PartitionFlow, run: list[Message], now_ms: float, polled: bool) -> int:
        """Hands as much of one run to the producer as the send queue has room for, with a delivery
        callback on the first and last record only; how many records it took. ``polled``: the run was
        just read from the source (its records' age is counted)."""
        if len(run) == 1:
            return self._send_one(flow, run[0], now_ms, polled)
        queue = self.queue
        values, keys = [message.value() for message in run], [message.key() for message in run]
        count, value_bytes = len(run), _total_length(values)
        size = value_bytes + _total_length(keys)
        if queue.records + count > queue.limits.max_records or queue.bytes + size > queue.limits.max_bytes:
            count, size, value_bytes = self._room_for(values, keys)
            if not count:
                if polled:
                    _note_polled(flow, run, now_ms)
                return 0
            if polled:
                _note_polled(flow, run[count:], now_ms)
            if count == 1:
                return self._send_one(flow, run[0], now_ms, polled)
            run, values, keys = run[:count], values[:count], keys[:count]
        # A record without a timestamp reads -1: the producer stamps it (0), its latency counts from now.
        stamps: list[Any] = [message.timestamp()[1] for message in run]  # int ms, now_ms (float) for -1
        produced = stamps
        if min(stamps) < 0:
            produced = [ts if ts >= 0 else 0 for ts in stamps]
            stamps = [ts if ts >= 0 else now_ms for ts in stamps]
        headers = [message.headers() for message in run]
        copied = CopiedRun(flow, cast(int, run[0].offset()), cast(int, run[-1].offset()), size, value_bytes,
                           now_ms, stamps)
        producer = self._producer_of(flow)
        produce, remote, partition, last = producer.produce, flow.remote, flow.partition, count - 1
        # Positional: topic, value, key, partition, on_delivery, callback, timestamp, headers (no
        # keyword dict a record).
        try:
            produce(remote, values[0], keys[0], partition, functools.partial(self._run_started, copied), None,
                    produced[0], headers[0])
        except BufferError:  # librdkafka's own queue is full (a client setting below ours): held
            if polled:
                _note_polled(flow, run, now_ms)
            return 0
        except KafkaException as exc:
            _produce_waiting(producer, flow, values[0], keys[0], produced[0], headers[0],
                             functools.partial(self._run_started, copied), exc)
        for value, key, ts, header in zip(values[1:last], keys[1:last], produced[1:last], headers[1:last],
                                          strict=True):
            try:
                produce(remote, value, key, partition, None, None, ts, header)
            except (BufferError, KafkaException) as exc:
                _produce_waiting(producer, flow, value, key, ts, header, None, exc)
        done = functools.partial(self._run_delivered, copied)
        value, key, ts, header = values[last], keys[last], produced[last], headers[last]
        try:
            produce(remote, value, key, partition, done, None, ts, header)
        except (BufferError, KafkaException) as exc:
            _produce_waiting(producer, flow, value, key, ts, header, done, exc)
        if polled:
            flow.stats.polled_run(count, count * now_ms - copied.stamp_sum, now_ms - copied.stamp_max,
                                  now_ms - copied.stamp_min, now_ms - copied.stamp_last)
        queue.sent(size, count)
        flow.in_flight.append(copied)
        flow.produced = copied.last
        return count

    def _room_for(self, values: list[bytes | None], keys: list[bytes | None]) -> tuple[int, int, int]:
        """How many of a run's first records the send queue has room for, their size and their values'."""
        queue = self.queue
        records, total, limits = queue.records, queue.bytes, queue.limits
        taken = value_bytes = 0
        for value, key in zip(values, keys, strict=True):
            value_size = len(value) if value else 0
            size = value_size + (len(key) if key else 0)
            # (an empty queue takes any record: one larger than the byte limit still moves)
            if records and (records >= limits.max_records or total + size > limits.max_bytes):
                break
            records += 1
            total += size
            value_bytes += value_size
            taken += 1
        return taken, total - queue.bytes, value_bytes

    def _send_one(self, flow: PartitionFlow, message: Message, now_ms: float, polled: bool) -> int:
        """`_send_run` of a run of one record (at low rates most runs are)."""
        queue = self.queue
        value, key = message.value(), message.key()
        value_size = len(value) if value else 0
        size = value_size + (len(key) if key else 0)
        kind, ts = message.timestamp()
        stamp = ts if kind != 0 and ts >= 0 else now_ms
        if polled:  # read from the source, whether or not the queue takes it now
            flow.stats.polled(now_ms - stamp)
        if queue.records and (queue.records >= queue.limits.max_records
                              or queue.bytes + size > queue.limits.max_bytes):
            return 0
        offset = cast(int, message.offset())  # a record has one (the stubs: Optional)
        copied = CopiedRun(flow, offset, offset, size, value_size, now_ms, [stamp])
        producer = self._producer_of(flow)
        done = functools.partial(self._run_delivered, copied)
        ts = 0 if stamp is now_ms else ts  # 0: the producer stamps a record without one
        try:
            producer.produce(flow.remote, value, key, flow.partition, done, None, ts, message.headers())
        except BufferError:
            return 0
        except KafkaException as exc:
            _produce_waiting(producer, flow, value, key, ts, message.headers(), done, exc)
        queue.sent(size)
        flow.in_flight.append(copied)
        flow.produced = offset
        return 1

    def _run_started(self, copied: CopiedRun, error: KafkaError | None, message: Message) -> None:
        """The delivery report of a run's first record (of several)."""
        if error is not None:
            self._failure = f"delivery to {message.topic()}[{message.partition()}] failed: {error}"
            return
        copied.first_downstream = cast(int, message.offset())  # delivered: it has one

    def _run_delivered(self, copied: CopiedRun, error: KafkaError | None, message: Message) -> None:
        """The delivery report of a run's last record: the whole run is acknowledged."""
        self.queue.settled(copied.size, copied.last - copied.first + 1)
        flow = copied.flow
        if flow.in_flight and flow.in_flight[0] is copied:
            flow.in_flight.popleft()
        if error is not None:
            self._failure = f"delivery to {message.topic()}[{message.partition()}] failed: {error}"
            return
        copied.last_downstream = cast(int, message.offset())
        if copied.first == copied.last:
            copied.first_downstream = copied.last_downstream
        if self.flows.get(flow.key) is flow:  # not released meanwhile
            self._acknowledged(copied)

    def _delivered_other(self, error: KafkaError | None, message: Message) -> None:
        """Progress (and metrics) records on the replication's producer: a refusal fails the worker."""
        if error is not None:
            self._failure = f"delivery to {message.topic()}[{message.partition()}] failed: {error}"

    def _acknowledged(self, copied: CopiedRun) -> None:
        raise NotImplementedError

    def _producer_of(self, flow: PartitionFlow) -> Producer:
        raise NotImplementedError

    def retire(self, tasks: Iterable[int]) -> None:
        """Tasks this worker no longer owns, their partitions released: nothing held per task here."""

    def _check(self) -> None:
        if self._failure is not None:
            raise DeliveryFailed(self._failure)

    def _progress_record(self, flow: PartitionFlow, offset: int) -> tuple[bytes, bytes]:
        return encode_key(SourcePartition(self.source, flow.topic, flow.partition)), encode_value(offset)

    def _feed_syncs(self, copied: CopiedRun) -> None:
        if self.emitter is not None:
            self.emitter.acknowledged_run(copied.flow.topic, copied.flow.partition, copied.first,
                                          copied.first_downstream, copied.last, copied.last_downstream)


class AtLeastOnceWriter(_WriterBase):
    def __init__(self, producer: Producer, source: str, progress_topic: str,
                 emitter: OffsetSyncEmitter | None, limits: QueueLimits | None = None,
                 producers: CopyProducers | None = None) -> None:
        """``producer`` carries progress and metrics, and copies; ``producers`` (whose first is
        ``producer``) spread the copy over more when a target broker leads many partitions."""
        super().__init__(source, progress_topic, emitter, limits)
        self.producer = producer
        self.copying = producers or CopyProducers(producer)
        self._next_flush = time.monotonic() + PROGRESS_FLUSH_INTERVAL_S
        self._next_delivery_check = 0.0

    @property
    def delivered(self) -> Callable[[KafkaError | None, Message], None]:
        """The delivery callback for other records on this producer (metrics): a refusal fails the worker."""
        return self._delivered_other

    def _acknowledged(self, copied: CopiedRun) -> None:
        copied.flow.acked = copied.last
        copied.acknowledged(self._now_ms)
        self._feed_syncs(copied)

    def add(self, flows: Iterable[PartitionFlow]) -> None:
        flows = list(flows)
        for flow in flows:
            self.flows[flow.key] = flow
        self.copying.place(flows)

    def _producer_of(self, flow: PartitionFlow) -> Producer:
        return self.copying.producers[flow.lane]

    def tick(self, now: float) -> None:
        self._now_ms = time.time() * 1000
        self.copying.poll()
        self.queue.note_acknowledgements(now)
        self._check()
        if now >= self._next_delivery_check:
            self._next_delivery_check = now + DELIVERY_CHECK_S
            self._check_delivery_timeout()
        self._send_backlog()
        if self.emitter is not None:
            self.emitter.send_due()
        if now >= self._next_flush:
            self._persist(self.flows.values())
            if self.emitter is not None:
                self.emitter.flush_delayed()
            self._next_flush = now + PROGRESS_FLUSH_INTERVAL_S

    def _check_delivery_timeout(self) -> None:
        oldest = min((flow.in_flight[0].sent_ms for flow in self.flows.values() if flow.in_flight),
                     default=None)
        waited_s = 0.0 if oldest is None else (self._now_ms - oldest) / 1000
        if waited_s >= DELIVERY_TIMEOUT_S:
            raise DeliveryFailed(f"records not acknowledged by the target within {DELIVERY_TIMEOUT_S:.0f} s "
                                 f"({self.queue.records} records wait)")

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
        self.copying.leave(flows)
        self.queue.drop(flow.key for flow in flows)

    def _persist(self, flows: Iterable[PartitionFlow]) -> None:
        for flow in flows:
            if flow.acked > flow.persisted:
                key, value = self._progress_record(flow, flow.acked)
                self.producer.produce(self.progress_topic, value, key, on_delivery=self._delivered_other)
                flow.persisted = flow.acked

    def _flush(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        self._now_ms = time.time() * 1000
        if self.copying.flush(timeout_s) > 0:
            raise DeliveryFailed(f"records not acknowledged by the target within {timeout_s:.0f} s")
        self.queue.note_acknowledgements(time.monotonic())
        self._check()


def _note_polled(flow: PartitionFlow, messages: Iterable[Message], now_ms: float) -> None:
    """The age of records read but held (MM2 measures record age at poll time)."""
    for message in messages:
        kind, ts = message.timestamp()
        flow.stats.polled(now_ms - ts if kind != 0 and ts > 0 else 0.0)


def _produce_waiting(producer: Producer, flow: PartitionFlow, value: bytes | None, key: bytes | None, ts: int,
                     headers: HeadersType | None, done: Callable[..., None] | None, error: Exception) -> None:
    """Produces one record of a run after librdkafka refused it: a remote partition just created that
    the producer's metadata does not show yet, or no room in its queue, is waited for (bounded)."""
    deadline = time.monotonic() + (BUFFER_WAIT_S if isinstance(error, BufferError) else PARTITION_WAIT_S)
    while True:
        if isinstance(error, KafkaException):
            if error.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise error
            producer.list_topics(flow.remote, timeout=5)  # refreshes the producer's metadata
        elif time.monotonic() > deadline:
            raise DeliveryFailed(f"no room in the producer's queue for {BUFFER_WAIT_S:.0f} s")
        producer.poll(0.2)
        try:
            producer.produce(flow.remote, value, key, flow.partition, done, None, ts, headers)
            return
        except (KafkaException, BufferError) as exc:
            error = exc


def _total_length(items: list[bytes | None]) -> int:
    """The summed length of values or keys, None (a tombstone, no key) counting 0."""
    missing = items.count(None)
    if not missing:
        return sum(map(len, cast("list[bytes]", items)))
    return 0 if missing == len(items) else sum(len(item) for item in items if item is not None)


def _consume_error(message: Message) -> None:
    error = cast(KafkaError, message.error())  # called for error events only
    if error.code() == KafkaError._PARTITION_EOF:
        return
    if error.fatal():
        raise KafkaException(error)
    LOG.warning("consume error on %s[%s]: %s", message.topic(), message.partition(), error)
