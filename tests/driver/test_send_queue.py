"""The replication's bounded send queue, its per-partition backlog and the outage reasons (pure logic:
a stand-in producer that takes a fixed number of records; the real target is in
test_replication_outages.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from driver.replication_stats import PartitionStats
from driver.send_queue import OUTAGE_AFTER_S, QueueLimits, SendQueue
from driver.source_watch import SourceWatch
from driver.target_writer import DELIVERY_TIMEOUT_S, AtLeastOnceWriter, DeliveryFailed, PartitionFlow


class Record(Message):
    """A polled message: confluent_kafka's own Message, built in Python. A keyed record carries a header."""

    def __init__(self, topic: str, partition: int, offset: int, value_: bytes | None = b"v" * 10,
                 key_: bytes | None = None, timestamp_: int = 1_700_000_000_000,
                 error_: KafkaError | None = None) -> None:
        # timestamp_ -1: none (librdkafka's reading of a record without one)
        super().__init__(topic=topic, partition=partition, offset=offset, value=value_, key=key_,
                         headers=[("h", str(offset).encode())] if key_ else None, error=error_,
                         timestamp=(0, -1) if timestamp_ < 0 else (1, timestamp_))


@dataclass
class Producer:
    """Takes records until `room` is used up, then raises BufferError like librdkafka's full queue.
    Keeps each record's delivery callback (None for most records of a run) to acknowledge it later."""

    room: int = 1000
    produced: list[tuple[str, int, bytes]] = field(default_factory=list)
    # value, key, timestamp, headers
    sent: list[tuple[bytes | None, object, int, object]] = field(default_factory=list)
    callbacks: list[Callable[..., None] | None] = field(default_factory=list)
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    downstream: list[int] = field(default_factory=list)
    acknowledged: int = 0  # records acknowledged so far, in production order

    def produce(self, topic: str, value: bytes, key: object = None, partition: int = -1,
                on_delivery: Callable[..., None] | None = None, callback: object = None, timestamp: int = 0,
                headers: object = None) -> None:
        """confluent_kafka's order: topic, value, key, partition, on_delivery, callback, timestamp,
        headers."""
        if len(self.produced) - self.acknowledged >= self.room:
            raise BufferError("Local: Queue full")
        self.produced.append((topic, partition, value))
        self.sent.append((value, key, timestamp, headers))
        self.callbacks.append(on_delivery)
        offset = self.next_offset.get((topic, partition), 0)
        self.next_offset[(topic, partition)] = offset + 1
        self.downstream.append(offset)

    def poll(self, _timeout: float) -> int:
        return 0

    def acknowledge(self, records: int) -> None:
        """The target acknowledges the next ``records`` records (their callbacks run, as in a poll)."""
        for index in range(self.acknowledged, self.acknowledged + records):
            callback = self.callbacks[index]
            if callback is not None:
                topic, partition, _ = self.produced[index]
                callback(None, Record(topic, partition, self.downstream[index]))
        self.acknowledged += records


def writer_with(limits: QueueLimits, producer: Producer, partitions: int = 2) -> AtLeastOnceWriter:
    # A stand-in with produce and poll: what the writer calls on the paths these tests take.
    writer = AtLeastOnceWriter(cast(confluent_kafka.Producer, producer), "east", "mm2-offsets.east.internal",
                               None, limits)
    writer.add(PartitionFlow("t", p, "east.t", PartitionStats("east.t", "t", p)) for p in range(partitions))
    return writer


def test_records_past_the_limit_wait_in_order_and_their_partition_is_paused() -> None:
    producer = Producer()
    writer = writer_with(QueueLimits(max_records=3, max_bytes=1 << 20, fetch_max_bytes=1 << 20), producer)
    writer.write([*(Record("t", 0, o) for o in range(5)), Record("t", 1, 0)])
    assert [v for _, _, v in producer.produced] == [b"v" * 10] * 3
    assert writer.paused() == {("t", 0), ("t", 1)}
    assert writer.queue.held_records() == 3
    producer.acknowledge(2)  # the run's first two of three records: its last not yet
    writer.tick(0.0)
    assert writer.paused() == {("t", 0), ("t", 1)} and writer.flows[("t", 0)].acked == -1
    producer.acknowledge(1)  # the run of three (offsets 0-2 of partition 0) is acknowledged
    writer.tick(0.0)
    assert writer.paused() == set(), "both backlogs were sent, in order"
    assert [f.produced for f in writer.flows.values()] == [4, 0]
    assert [(run.first, run.last) for run in writer.flows[("t", 0)].in_flight] == [(3, 4)]
    assert writer.flows[("t", 0)].acked == 2
    producer.acknowledge(3)
    assert [f.acked for f in writer.flows.values()] == [4, 0]
    assert not any(f.in_flight for f in writer.flows.values()) and writer.queue.records == 0


def test_only_a_runs_first_and_last_record_carry_a_callback_and_the_last_acknowledges_it_all() -> None:
    producer = Producer()
    writer = writer_with(QueueLimits(100, 1 << 20, 1 << 20), producer)
    # Partition 0 at offsets 0-4, then 7-8 (a gap: a new run), partition 1 a single record.
    writer.write([*(Record("t", 0, o) for o in (0, 1, 2, 3, 4, 7, 8)), Record("t", 1, 5)])
    assert [callback is not None for callback in producer.callbacks] == [
        True, False, False, False, True, True, True, True]
    producer.acknowledge(4)
    assert writer.flows[("t", 0)].acked == -1, "the run's last record is not acknowledged yet"
    assert writer.queue.records == 8
    producer.acknowledge(4)
    flow = writer.flows[("t", 0)]
    assert (flow.acked, writer.flows[("t", 1)].acked) == (8, 5)
    assert (writer.queue.records, writer.queue.bytes) == (0, 0)
    report = flow.stats.report(0, 1000, "east", "west")
    assert (report.record_count, report.byte_count, report.upstream_offset, report.target_offset) == (
        7, 70, 8, 6)
    assert report.replication_latency_ms is not None and report.replication_latency_ms.count == 7
    assert report.record_age_ms is not None and report.record_age_ms.count == 7


def test_a_batch_is_copied_as_it_was_read_whatever_its_records_hold() -> None:
    """Keys, tombstones, headers and timestamps go out as read (none: the producer stamps it, 0); a
    consume error is skipped without breaking its partition's run; partitions interleaved in the batch
    keep their order."""
    producer = Producer()
    writer = writer_with(QueueLimits(100, 1 << 20, 1 << 20), producer)
    eof = KafkaError(KafkaError._PARTITION_EOF)
    batch: list[Message] = [Record("t", 0, 0, key_=b"k0"), Record("t", 0, 1, value_=None, key_=b"k1"),
             Record("t", 0, 1, error_=eof), Record("t", 0, 2, timestamp_=-1),
             Record("t", 1, 7), Record("t", 0, 3), Record("t", 1, 8, value_=b"")]
    writer.write(batch)
    ts = 1_700_000_000_000
    assert [(t, p) for t, p, _ in producer.produced] == [("east.t", 0)] * 3 + [("east.t", 1), ("east.t", 0),
                                                                               ("east.t", 1)]
    assert producer.sent == [(b"v" * 10, b"k0", ts, [("h", b"0")]), (None, b"k1", ts, [("h", b"1")]),
                             (b"v" * 10, None, 0, None), (b"v" * 10, None, ts, None),
                             (b"v" * 10, None, ts, None), (b"", None, ts, None)]
    assert [callback is not None for callback in producer.callbacks] == [True, False, True, True, True, True]
    assert writer.queue.records == 6 and writer.queue.bytes == 10 + 2 + 2 + 10 + 10 + 10
    producer.acknowledge(6)
    flow = writer.flows[("t", 0)]
    assert (flow.acked, writer.flows[("t", 1)].acked) == (3, 8)
    assert (writer.queue.records, writer.queue.bytes) == (0, 0)
    report = flow.stats.report(0, 1000, "east", "west")
    assert (report.record_count, report.byte_count, report.upstream_offset, report.target_offset) == (
        4, 30, 3, 3)


def test_a_run_larger_than_the_room_left_is_split_where_the_room_ends() -> None:
    producer = Producer()
    writer = writer_with(QueueLimits(100, 35, 1 << 20), producer, partitions=1)
    writer.write([Record("t", 0, o) for o in range(3)])
    writer.write([Record("t", 0, o) for o in range(3, 8)])
    assert len(producer.produced) == 3 and writer.queue.held_records() == 5, "30 of 35 bytes taken"
    producer.acknowledge(3)
    writer.tick(0.0)
    assert len(producer.produced) == 6 and writer.queue.held_records() == 2
    assert [(run.first, run.last) for run in writer.flows[("t", 0)].in_flight] == [(3, 5)]


def test_a_byte_limit_holds_records_but_an_empty_queue_takes_one_larger_than_it() -> None:
    queue = SendQueue(QueueLimits(max_records=100, max_bytes=2048, fetch_max_bytes=1 << 20))
    assert queue.has_room(10_000)
    queue.sent(10_000)
    assert not queue.has_room(1)
    queue.settled(10_000)
    queue.sent(1000)
    assert queue.has_room(1000) and not queue.has_room(1049)


def test_a_full_librdkafka_queue_holds_the_record_instead_of_blocking() -> None:
    producer = Producer(room=2)
    writer = writer_with(QueueLimits(100, 1 << 20, 1 << 20), producer, partitions=1)
    writer.write([Record("t", 0, o) for o in range(2)])
    writer.write([Record("t", 0, o) for o in range(2, 4)])
    assert len(producer.produced) == 2 and writer.paused() == {("t", 0)}
    assert writer.queue.held_records() == 2
    writer.queue.drop([("t", 0)])  # the partition revoked: its backlog is the next owner's to replay
    assert writer.paused() == set()


def test_a_record_refused_in_the_middle_of_a_run_is_produced_again_in_its_place() -> None:
    """librdkafka refuses a record between a run's first and last (its queue full, or the remote partition
    not in its metadata yet): that record is produced again once the producer takes it, and the rest of
    the run follows it, each record once and in order."""

    class Refusing(Producer):
        def __init__(self, refusals: dict[int, Exception]) -> None:
            super().__init__()
            self.refusals = refusals  # record n's first produce call raises this

        def produce(self, *args: object, **kwargs: object) -> None:
            refusal = self.refusals.pop(len(self.produced), None)
            if refusal is not None:
                raise refusal
            super().produce(*args, **kwargs)  # type: ignore[arg-type]

        def list_topics(self, *_args: object, **_kwargs: object) -> None:
            return None

    unknown = KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
    for refusals in ({2: BufferError("Local: Queue full")}, {1: unknown, 4: unknown}):
        producer = Refusing(dict(refusals))
        writer = writer_with(QueueLimits(100, 1 << 20, 1 << 20), producer, partitions=1)
        writer.write([Record("t", 0, o) for o in range(6)])
        assert not producer.refusals, "every refusal was met"
        assert [value for value, *_ in producer.sent] == [b"v" * 10] * 6
        assert [callback is not None for callback in producer.callbacks] == [True, False, False, False, False,
                                                                             True]
        producer.acknowledge(6)
        assert writer.flows[("t", 0)].acked == 5 and writer.queue.records == 0


def test_a_silent_target_is_an_outage_after_a_while_and_an_acknowledgement_ends_it() -> None:
    queue = SendQueue(QueueLimits(100, 1 << 20, 1 << 20))
    queue.sent(10)
    began = queue._waiting_since or 0.0
    assert queue.outage("west", now=began + OUTAGE_AFTER_S - 1) is None
    queue.hold(("t", 0), [Record("t", 0, 1)])
    reason = queue.outage("west", now=began + OUTAGE_AFTER_S + 5)
    assert reason is not None and "'west'" in reason and "1 source partition(s) paused" in reason
    queue.settled(10)
    assert queue.outage("west") is None


def test_queue_limits_come_from_the_settings_with_librdkafka_headroom(tmp_path) -> None:
    from contract.config import ConfigError, load_config

    path = tmp_path / "srm.properties"
    path.write_text("clusters = east, west\neast.bootstrap.servers = a:9092\n"
                    "west.bootstrap.servers = b:9092\neast->west.enabled = true\n"
                    "east->west.replication.queue.max.bytes = 4194304\n")
    limits = QueueLimits.from_config(load_config(path), "east", "west")
    assert (limits.max_records, limits.max_bytes) == (100_000, 4_194_304)
    kbytes = limits.producer_limits()["queue.buffering.max.kbytes"]
    assert isinstance(kbytes, int) and kbytes > 4096
    path.write_text(path.read_text() + "replication.queue.max.records = 0\n")
    with pytest.raises(ConfigError, match="replication.queue.max.records"):
        QueueLimits.from_config(load_config(path), "east", "west")


def test_the_source_watch_reports_only_what_a_metadata_request_confirms() -> None:
    watch = SourceWatch("east")
    assert watch.outage(lambda _t: None) is None
    watch.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))

    def refused(_timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))

    reason = watch.outage(refused, now=1e9)
    assert reason is not None and "source cluster 'east' unreachable" in reason and "refused" in reason
    watch.records_arrived()
    assert watch.outage(refused, now=1e9 + 10) is None
    watch.on_error(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
    assert watch.outage(lambda _t: None, now=1e9 + 20) is None, "a metadata answer ends the suspicion"
    assert not watch.suspect


def test_acknowledgements_noted_once_a_poll_keep_the_outage_watch_current() -> None:
    queue = SendQueue(QueueLimits(100, 1 << 20, 1 << 20))
    queue.sent(10)
    queue.sent(10)
    began = queue._waiting_since or 0.0
    queue.settled(10)  # a delivery callback: no clock read of its own
    queue.note_acknowledgements(began + OUTAGE_AFTER_S)  # the poll that served it
    assert queue.outage("west", now=began + OUTAGE_AFTER_S + 1) is None, "acknowledged a second ago"
    assert queue.outage("west", now=began + 2 * OUTAGE_AFTER_S + 1) is not None
    queue.settled(10)
    assert (queue.records, queue.bytes) == (0, 0) and queue.outage("west") is None


def test_a_partitions_latency_and_age_summaries_cover_every_record_of_the_period() -> None:
    stats = PartitionStats("east.t", "t", 0)
    for offset, (age_ms, latency_ms) in enumerate([(5.0, 20.0), (1.0, 40.0), (9.0, 30.0)] * 3000):
        stats.polled(age_ms)
        stats.replicated_run(offset, offset, 1, 100, latency_ms, latency_ms, latency_ms, latency_ms)
    report = stats.report(0, 1000, "east", "west")
    assert report.replication_latency_ms is not None and report.record_age_ms is not None
    latency, age = report.replication_latency_ms, report.record_age_ms
    assert (latency.min, latency.max, latency.avg, latency.last) == (20.0, 40.0, 30.0, 30.0)
    assert latency.count == 9000
    assert (age.min, age.max, age.avg, age.last, age.count) == (1.0, 9.0, 5.0, 9.0, 9000)
    assert report.byte_count == 900_000
    empty = stats.report(0, 1000, "east", "west")
    assert empty.replication_latency_ms is None and empty.record_age_ms is None and empty.record_count == 0


def test_a_record_unacknowledged_for_the_delivery_timeout_fails_the_worker() -> None:
    producer = Producer()
    writer = writer_with(QueueLimits(100, 1 << 20, 1 << 20), producer)
    writer.write([*(Record("t", 0, o) for o in range(3)), Record("t", 1, 0)])
    writer.tick(1000.0)  # nothing is old yet
    producer.acknowledge(3)
    writer.flows[("t", 1)].in_flight[0].sent_ms -= DELIVERY_TIMEOUT_S * 1000  # produced 300 s ago
    with pytest.raises(DeliveryFailed, match="not acknowledged by the target within 300 s"):
        writer.tick(2000.0)
