"""Test harness for the checkpoint tests: replicates a topic by hand and writes MM2 offset syncs.

Stands in for the data path: every record is copied to the remote topic (same partition, with its
upstream offset in an `up` header) and each acknowledged copy goes through the real OffsetSyncWriter,
whose syncs are produced to the offset-syncs topic on the source, exactly as MM2 lays them out. The
remote partitions can start at a later offset than the source ones (records deleted before the copy),
so translation is never the identity.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import OFFSET_END, Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contract.records.mm2 import Checkpoint, OffsetSync, WireFormatError
from driver.offset_sync_writer import DeliveryCallback, OffsetSyncWriter, QueuedOffsetSync


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result()


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, first: int = 0) -> None:
    """Values `<partition>-<n>`, n counting from `first`: the upstream offset when written in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for partition in range(partitions):
        for i in range(first, first + per_partition):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commits `offsets` (partition -> offset) of `topic` for `group`, as an idle consumer would."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def read_syncs(bootstrap: str, syncs_topic: str, topic: str) -> dict[int, list[tuple[int, int]]]:
    """Every decodable (upstream, downstream) sync of `topic` in an offset-syncs topic, per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"syncs-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(syncs_topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(syncs_topic, 0, 0)])
    syncs: dict[int, list[tuple[int, int]]] = {}
    position, deadline = 0, time.monotonic() + 30
    while position < end and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.5):
            offset = message.offset()
            if message.error() is not None:
                continue
            assert offset is not None  # a record has one
            position = offset + 1
            try:
                sync = OffsetSync.decode(message.key(), message.value())
            except WireFormatError:
                continue
            if sync.topic == topic:
                syncs.setdefault(sync.partition, []).append((sync.upstream_offset, sync.downstream_offset))
    consumer.close()
    return syncs


def upstream_of(message: Message) -> int:
    """The upstream offset a copied record carries (its own offset for an original record)."""
    headers = message.headers() or []
    assert isinstance(headers, list)  # confluent-kafka answers a list (its stubs allow a dict too)
    for name, value in headers:
        if name == "up":
            assert value is not None
            return int(value)
    offset = message.offset()
    assert offset is not None
    return offset


@dataclass
class ManualReplication:
    """`source_topic` on `source` copied to `remote_topic` on `target`, syncs to `syncs_topic` on source."""

    source: str
    target: str
    source_topic: str
    remote_topic: str
    syncs_topic: str
    partitions: int
    offset_lag_max: int = 10
    syncs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # partition -> (up, down)
    _positions: dict[int, int] = field(default_factory=dict)

    def create(self, shift: int) -> None:
        """Both topics; the remote partitions start at offset `shift`."""
        create_topic(self.source, self.source_topic, self.partitions)
        create_topic(self.target, self.remote_topic, self.partitions)
        produce(self.target, self.remote_topic, self.partitions, shift)
        admin = AdminClient({"bootstrap.servers": self.target})
        # OFFSET_END (-1) deletes everything written so far: the next copy lands at `shift`.
        for future in admin.delete_records(
                [TopicPartition(self.remote_topic, p, OFFSET_END) for p in range(self.partitions)]).values():
            future.result()
        self._positions = {p: 0 for p in range(self.partitions)}

    def copy(self) -> int:
        """Copy what is new on the source; returns how many records were copied."""
        records = self._read_new()
        target = Producer({"bootstrap.servers": self.target, "linger.ms": 5, "enable.idempotence": True})
        acked: list[tuple[int, int, int]] = []  # partition, upstream, downstream in ack order
        for message in records:
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # a record has both
            target.produce(self.remote_topic, value=message.value(), key=message.key(),
                           partition=partition, headers=[("up", str(offset).encode())],
                           on_delivery=_collect(acked, offset))
        assert target.flush(30) == 0
        self._write_syncs(sorted(acked, key=lambda a: (a[0], a[1])))
        return len(records)

    def latest_sync_at_or_before(self, partition: int, upstream: int) -> tuple[int, int]:
        return max(s for s in self.syncs[partition] if s[0] <= upstream)

    def latest_sync_at_or_before_downstream(self, partition: int, downstream: int) -> tuple[int, int]:
        return max((s for s in self.syncs[partition] if s[1] <= downstream), key=lambda s: s[1])

    def _read_new(self) -> list[Message]:
        ends = {p: _end_offset(self.source, self.source_topic, p) for p in range(self.partitions)}
        wanted = sum(ends[p] - self._positions[p] for p in ends)
        consumer = Consumer({"bootstrap.servers": self.source, "group.id": f"copy-{uuid.uuid4()}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(self.source_topic, p, self._positions[p]) for p in ends])
        records: list[Message] = []
        deadline = time.monotonic() + 60
        while len(records) < wanted and time.monotonic() < deadline:
            records += [m for m in consumer.consume(500, timeout=0.5)  # a record has partition and offset
                        if m.error() is None and cast(int, m.offset()) < ends[cast(int, m.partition())]]
        consumer.close()
        assert len(records) == wanted, f"read {len(records)} of {wanted} new source records"
        self._positions = ends
        return records

    def _write_syncs(self, acked: list[tuple[int, int, int]]) -> None:
        producer = Producer({"bootstrap.servers": self.source, "linger.ms": 1})
        writer = OffsetSyncWriter(_sender(producer, self.syncs_topic, self.syncs), self.offset_lag_max)
        for partition, upstream, downstream in acked:
            writer.on_record_committed(self.source_topic, partition, upstream, downstream)
            producer.poll(0)
        writer.on_offsets_flushed()
        deadline = time.monotonic() + 30
        while (writer.queue.pending() or writer.queue.in_flight) and time.monotonic() < deadline:
            producer.flush(1)
            writer.queue.fire_pending()
        assert not writer.queue.pending() and not writer.queue.in_flight, "offset syncs not all sent"


def _collect(acked: list[tuple[int, int, int]], upstream: int) -> Callable[..., None]:
    def delivered(err: object, message: Message) -> None:
        assert err is None, err
        acked.append((cast(int, message.partition()), upstream, cast(int, message.offset())))  # delivered
    return delivered


def _sender(producer: Producer, topic: str, syncs: dict[int, list[tuple[int, int]]]):
    def send(sync: QueuedOffsetSync, done: DeliveryCallback) -> None:
        record = OffsetSync(sync.topic, sync.partition, sync.upstream_offset, sync.downstream_offset)

        def delivered(err: object, _message: Message) -> None:
            if err is None:
                syncs.setdefault(sync.partition, []).append((sync.upstream_offset, sync.downstream_offset))
            done(None if err is None else RuntimeError(str(err)))

        producer.produce(topic, key=record.encode_key(), value=record.encode_value(), partition=0,
                         on_delivery=delivered)
    return send


def _end_offset(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4()}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


class CheckpointLog:
    """Accumulates the Checkpoint records of a checkpoints topic as they arrive."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cp-{uuid.uuid4()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.records: list[tuple[Checkpoint, int]] = []  # checkpoint, record timestamp
        self.undecodable = 0

    def drain(self) -> None:
        """Read until nothing more arrives."""
        while self.poll():
            pass

    def poll(self) -> int:
        messages = self.consumer.consume(500, timeout=0.3)
        for message in messages:
            if message.error() is not None:
                continue
            try:
                checkpoint = Checkpoint.decode(message.key(), message.value())
            except WireFormatError:
                self.undecodable += 1
                continue
            self.records.append((checkpoint, message.timestamp()[1]))
        return len(messages)

    def of(self, group: str) -> list[Checkpoint]:
        return [c for c, _ in self.records if c.consumer_group_id == group]

    def latest(self, group: str) -> dict[tuple[str, int], Checkpoint]:
        return {(c.topic, c.partition): c for c in self.of(group)}

    def wait_for(self, group: str, upstream: dict[tuple[str, int], int], timeout_s: float = 60) -> None:
        """Until the latest checkpoint of every (downstream topic, partition) has the given upstream."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            latest = self.latest(group)
            if all(k in latest and latest[k].upstream_offset == u for k, u in upstream.items()):
                return
        raise AssertionError(f"no checkpoints {upstream} for {group}; latest {self.latest(group)}")

    def close(self) -> None:
        self.consumer.close()
