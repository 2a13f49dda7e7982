"""Counts a crash lost: the rule (progress minus what the last report counted), how a partition's first
report carries them, and the tail read of the metrics topic against a real broker (a garbage record,
another replication's reports and a partition nobody asked for among them)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from contract.records import raw_metrics
from contract.records.raw_metrics import PartitionMetrics
from driver.count_recovery import MAX_TAIL, MIN_TAIL, LastReports, tail_size, uncounted
from driver.replication_stats import PartitionStats
from tests.driver.replication_cluster_ops import create_topic, eventually


def test_uncounted_is_what_progress_recorded_past_the_last_report() -> None:
    assert uncounted(719, 649) == 70  # the crash of CI2: 70 copied and recorded, not reported
    assert uncounted(649, 719) == 0  # reported past the progress: those records are copied again
    assert uncounted(719, 719) == 0
    assert uncounted(None, 649) == uncounted(719, None) == uncounted(-1, 10) == 0  # unknown: nothing


def test_the_first_report_carries_the_recovered_count_once_and_latency_ignores_it() -> None:
    stats = PartitionStats("east.orders", "orders", 0)
    stats.recovered_count = 70
    stats.replicated_run(729, 729, 10, 1000, latency_sum=50.0, latency_min=4.0, latency_max=6.0,
                         latency_last=5.0)
    first = stats.report(1_000, 5_000, "east", "west")
    assert first.record_count == 80 and first.byte_count == 1000
    assert first.replication_latency_ms is not None and first.replication_latency_ms.avg == 5.0
    assert first.replication_latency_ms.count == 10
    assert stats.report(6_000, 5_000, "east", "west").record_count == 0


def test_the_tail_grows_with_the_partitions_within_bounds() -> None:
    assert tail_size(10) == MIN_TAIL
    assert tail_size(10_000) == 80_000
    assert tail_size(10**7) == MAX_TAIL


def report(source: str, upstream_topic: str, partition: int, upstream_offset: int | None) -> PartitionMetrics:
    return PartitionMetrics(ts=1, period_ms=5000, source=source, target="west",
                            topic=f"{source}.{upstream_topic}", upstream_topic=upstream_topic,
                            partition=partition, record_count=1, byte_count=1,
                            upstream_offset=upstream_offset)


def test_the_last_reports_are_read_from_the_tail_of_the_metrics_topic(kafka_clusters: dict[str, str]) -> None:
    west = kafka_clusters["west"]
    topic = f"srm-metrics.tail-{uuid.uuid4().hex[:8]}.internal"
    create_topic(west, topic, 1, raw_metrics.TOPIC_CONFIGS)
    records = [report("east", "orders", 0, 99), report("east", "orders", 1, 49),
               report("north", "orders", 0, 5),  # another replication's
               report("east", "orders", 0, 109), report("east", "orders", 1, None),  # nothing counted
               report("east", "other", 0, 7)]  # a partition not asked for
    producer = Producer({"bootstrap.servers": west})
    producer.produce(topic, value=b"{not json")  # refused by the guard, passed over
    for record in records:
        key, value = raw_metrics.encode(record)
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    reader = LastReports("east", "west", topic)
    consumer = Consumer({"bootstrap.servers": west, "group.id": "tail-reader"})
    try:
        found = reader.read(consumer, [("orders", 0), ("orders", 1)], tail=100, timeout_s=60)
    finally:
        consumer.close()
    assert found == {("orders", 0): 109, ("orders", 1): 49}
    assert reader.guard.rejected == 1


def test_a_tail_ending_in_a_transaction_marker_is_read_to_its_end(kafka_clusters: dict[str, str]) -> None:
    """The last offset of a partition written transactionally is the commit marker, which no consumer
    is handed: the read ends on the consumer's position, not on a record at that offset (which would
    wait out the whole timeout and count nothing back)."""
    west = kafka_clusters["west"]
    topic = f"srm-metrics.marker-{uuid.uuid4().hex[:8]}.internal"
    create_topic(west, topic, 1, raw_metrics.TOPIC_CONFIGS)
    producer = Producer({"bootstrap.servers": west, "transactional.id": f"reports-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for record in (report("east", "orders", 0, 99), report("east", "orders", 0, 119)):
        key, value = raw_metrics.encode(record)
        producer.produce(topic, key=key, value=value)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": west, "group.id": "tail-reader",
                         "isolation.level": "read_committed"})
    # The commit returns before the broker writes the marker; read_committed sees nothing until then.
    committed_end = TopicPartition(topic, 0)
    eventually(lambda: consumer.get_watermark_offsets(committed_end, timeout=10)[1] == 3 or None,
               "the commit marker (offset 2, after the two reports) written")
    try:
        found = LastReports("east", "west", topic).read(consumer, [("orders", 0)], tail=100, timeout_s=60)
    finally:
        consumer.close()
    assert found == {("orders", 0): 119}
