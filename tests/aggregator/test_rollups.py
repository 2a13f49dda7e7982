"""Rollup math on a real SparkSession, fed Kafka-shaped rows (batch mode, same transformations)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from aggregator.redis_layout import ALL_TOPICS, INVALID_RECORDS_METRIC, LATEST_METRIC, WHOLE_TOPIC
from aggregator.rollups import parse, rollups, samples
from driver.wire import raw_metrics
from driver.wire.raw_metrics import GroupMetrics, LatencySummary, PartitionMetrics, ReplicationMetrics

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000  # a 10 s boundary


def kafka_rows(spark, records: list, garbage: list[bytes] = ()):
    values = [raw_metrics.encode(r)[1] for r in records] + list(garbage)
    rows = [("srm-metrics.east.internal", 0, offset, datetime.fromtimestamp(T0 / 1000, UTC), bytearray(v))
            for offset, v in enumerate(values)]
    return spark.createDataFrame(rows, "topic string, partition int, offset long, timestamp timestamp, "
                                       "value binary")


def partition_record(ts: int, partition: int, count: int, latency: LatencySummary | None = None,
                     lag: int | None = None) -> PartitionMetrics:
    return PartitionMetrics(ts=ts, period_ms=5000, source="east", target="west", topic="east.orders",
                            upstream_topic="orders", partition=partition, record_count=count,
                            byte_count=count * 100, replication_latency_ms=latency, records_lag=lag)


def collect(df) -> dict:
    """Topic-level and partition-level rows of east.orders, by (partition, metric, window start)."""
    return {(r["partition"], r["metric"], r["window_start"]): r for r in df.collect()
            if r["topic"] == "east.orders"}


def test_counts_latencies_and_gauges_per_partition_and_topic(spark):
    records = [
        partition_record(T0 + 1000, 0, 10, LatencySummary(1, 5, 2, 3, 10), lag=4),
        partition_record(T0 + 6000, 0, 20, LatencySummary(2, 8, 4, 8, 20), lag=1),
        partition_record(T0 + 3000, 1, 5, None, lag=9),
        partition_record(T0 + 12_000, 0, 7),  # next window
        ReplicationMetrics(ts=T0, period_ms=5000, source="east", target="west", status="RUNNING"),
    ]
    out = collect(rollups(samples(parse(kafka_rows(spark, records)))))
    first = out[(0, "record_count", T0)]
    assert (first["count"], first["sum"], first["min"], first["max"], first["last"]) == (2, 30, 10, 20, 20)
    latency = out[(0, "replication_latency_ms", T0)]
    assert latency["count"] == 30 and latency["sum"] == pytest.approx(10 * 2 + 20 * 4)
    assert (latency["min"], latency["max"], latency["last"]) == (1, 8, 8)
    assert out[(0, "records_lag", T0)]["last"] == 1
    topic = out[(WHOLE_TOPIC, "record_count", T0)]
    assert (topic["sum"], topic["count"]) == (35, 3)
    assert out[(0, "record_count", T0 + 10_000)]["sum"] == 7
    assert out[(WHOLE_TOPIC, "byte_count", T0)]["sum"] == 3500
    assert {r[1] for r in out} <= set(raw_metrics.METRICS) | {LATEST_METRIC}


def test_replication_level_counters_and_latest_records(spark):
    records = [
        partition_record(T0 + 1000, 0, 10, lag=4),
        PartitionMetrics(ts=T0 + 2000, period_ms=5000, source="east", target="west", topic="east.other",
                         upstream_topic="other", partition=1, record_count=5, byte_count=50, records_lag=2),
        partition_record(T0 + 4000, 0, 1, lag=3),
        ReplicationMetrics(ts=T0 + 4000, period_ms=5000, source="east", target="west", status="RUNNING"),
    ]
    rows = rollups(samples(parse(kafka_rows(spark, records)))).collect()
    whole = {r["metric"]: r for r in rows if r["topic"] == ALL_TOPICS and r["metric"] != LATEST_METRIC}
    assert set(whole) == {"record_count", "byte_count"}
    assert (whole["record_count"]["sum"], whole["byte_count"]["sum"]) == (16, 1150)
    assert whole["record_count"]["partition"] == WHOLE_TOPIC
    assert whole["record_count"]["upstream_topic"] is None
    latest = {(r["topic"], r["partition"]): json.loads(r["payload"])
              for r in rows if r["metric"] == LATEST_METRIC}
    assert latest[("east.orders", 0)]["ts"] == T0 + 4000 and latest[("east.orders", 0)]["records_lag"] == 3
    assert latest[(ALL_TOPICS, WHOLE_TOPIC)]["status"] == "RUNNING"
    assert latest[("east.other", 1)]["kind"] == "partition"
    assert all(r["payload"] is None for r in rows if r["metric"] != LATEST_METRIC)


def test_group_metrics_are_keyed_by_group(spark):
    record = GroupMetrics(ts=T0 + 1, period_ms=5000, source="east", target="west", group="billing",
                          topic="east.orders", upstream_topic="orders", partition=2,
                          checkpoint_latency_ms=LatencySummary(3, 3, 3, 3, 1), group_lag=12)
    rows = rollups(samples(parse(kafka_rows(spark, [record])))).collect()
    assert {(r["group"], r["partition"], r["metric"]) for r in rows} == {
        ("billing", p, m) for p in (2, WHOLE_TOPIC) for m in ("checkpoint_latency_ms", "group_lag")} | {
        ("billing", 2, LATEST_METRIC)}


def test_records_that_do_not_parse_are_flagged_not_fatal(spark):
    incomplete = b'{"v": 1, "kind": "partition", "ts": 5, "source": "east", "target": "west"}'
    elsewhere = raw_metrics.encode(PartitionMetrics(
        ts=T0, period_ms=1, source="east", target="north", topic="east.t", upstream_topic="t", partition=0,
        record_count=1, byte_count=1))[1]
    parsed = parse(kafka_rows(spark, [partition_record(T0, 0, 1)],
                              [b"not json", b'{"v": 9}', b"{}", incomplete, elsewhere]), target="west")
    assert [r["valid"] for r in parsed.orderBy("kafka_offset").collect()] == [True] + [False] * 5
    rows = rollups(samples(parsed, "west")).collect()
    assert {r["metric"] for r in rows} == {"record_count", "byte_count", LATEST_METRIC,
                                           INVALID_RECORDS_METRIC}
    (invalid,) = [r for r in rows if r["metric"] == INVALID_RECORDS_METRIC]
    assert (invalid["target"], invalid["source"], invalid["topic"], invalid["partition"]) == ("west", "east",
                                                                                              ALL_TOPICS, 0)
    assert (invalid["count"], invalid["min"], invalid["max"], invalid["last"]) == (5, 1, 5, 5)
    assert '"target":"north"' in invalid["payload"]  # the last one, for the log
