"""The rollup sink on a real Redis: coarser windows derived exactly, replays change nothing."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict

import pytest
import redis
from pyspark.sql import Row

from aggregator import redis_layout as layout
from aggregator.redis_sink import RedisRollupSink
from driver.wire.raw_metrics import PartitionMetrics, ReplicationMetrics

pytestmark = pytest.mark.integration

HOUR = 1_700_002_800_000  # an hour boundary


def row(start_ms: int, count: float, total: float, low: float, high: float, last: float,
        partition: int = 0, metric: str = "record_count", topic: str = "east.orders") -> Row:
    return Row(target="west", source="east", topic=topic, upstream_topic="orders", group="",
               partition=partition, metric=metric, window_start=start_ms, count=count, sum=total,
               min=low, max=high, last=last, payload=None)


@pytest.fixture
def sink(redis_url: str) -> RedisRollupSink:
    return RedisRollupSink(redis_url, f"test_{uuid.uuid4().hex[:8]}")


def members(client: redis.Redis, window: str, metric: str = "record_count", partition: int = 0,
            topic: str = "east.orders") -> list[layout.WindowAggregate]:
    key = layout.series_key(layout.SeriesId("west", "east", topic, partition, metric), window)
    return [layout.decode_member(m) for m in client.zrange(key, 0, -1)]


def test_coarser_windows_are_merged_from_finer_ones(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    sink.write([row(HOUR, 1, 10, 10, 10, 10, topic=topic), row(HOUR + 10_000, 2, 5, 1, 4, 4, topic=topic),
                row(HOUR + 60_000, 1, 7, 7, 7, 7, topic=topic)], batch_id=0)
    client = sink.client
    assert members(client, "1m", topic=topic) == [
        layout.WindowAggregate(HOUR, 3, 15, 1, 10, 4), layout.WindowAggregate(HOUR + 60_000, 1, 7, 7, 7, 7)]
    assert members(client, "1h", topic=topic) == [layout.WindowAggregate(HOUR, 4, 22, 1, 10, 7)]
    # A later batch updates a 10 s window in place (absolute values): the parents follow.
    sink.write([row(HOUR + 10_000, 3, 9, 1, 6, 6, topic=topic)], batch_id=1)
    assert members(client, "10s", topic=topic)[1] == layout.WindowAggregate(HOUR + 10_000, 3, 9, 1, 6, 6)
    assert members(client, "1h", topic=topic) == [layout.WindowAggregate(HOUR, 5, 26, 1, 10, 7)]


def test_replayed_batches_leave_redis_identical(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    batch = [row(HOUR + i * 10_000, 1, i, i, i, i, partition=i % 2, topic=topic) for i in range(12)]
    sink.write(batch, batch_id=5)

    def snapshot() -> dict:
        keys = sorted(k for k in sink.client.scan_iter(match=f"*{topic}*"))
        return {k: sink.client.dump(k) for k in keys}

    before = snapshot()
    sink.write(batch, batch_id=5)  # Spark re-runs the last batch after a crash
    sink.write(batch, batch_id=4)
    assert sink.last_batch_id() == 5
    assert snapshot() == before
    sink.write(batch, batch_id=6)  # same content under a new id: absolute values, same result
    assert snapshot() == before


def test_retention_trims_old_windows_and_keys_expire(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    retention = layout.WINDOWS["10s"].retention_ms
    sink.write([row(HOUR, 1, 1, 1, 1, 1, topic=topic)], batch_id=0)
    sink.write([row(HOUR + retention + 10_000, 1, 2, 2, 2, 2, topic=topic)], batch_id=1)
    assert [m.start_ms for m in members(sink.client, "10s", topic=topic)] == [HOUR + retention + 10_000]
    key = layout.series_key(layout.SeriesId("west", "east", topic, 0, "record_count"), "10s")
    assert 0 < sink.client.pttl(key) <= layout.key_ttl_ms("10s")


def test_discovery_indexes(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    sink.write([row(HOUR, 1, 1, 1, 1, 1, partition=3, topic=topic),
                row(HOUR, 1, 1, 1, 1, 1, partition=layout.WHOLE_TOPIC, topic=topic)], batch_id=0)
    client = sink.client
    assert b"west" in client.smembers(layout.targets_key())
    assert b"east" in client.smembers(layout.sources_key("west"))
    assert client.hget(layout.topics_key("west", "east"), topic) == b"orders"
    assert client.smembers(layout.partitions_key("west", "east", topic)) == {b"3"}


def latest_row(record, start_ms: int, topic: str, partition: int, group: str = "") -> Row:
    payload = json.dumps(asdict(record) | {"v": 1})
    return Row(target="west", source="east", topic=topic, upstream_topic=None, group=group,
               partition=partition, metric=layout.LATEST_METRIC, window_start=start_ms, count=0.0, sum=0.0,
               min=0.0, max=0.0, last=0.0, payload=payload)


def partition_report(ts: int, topic: str, end: int, lag: int) -> PartitionMetrics:
    return PartitionMetrics(ts=ts, period_ms=10_000, source="east", target="west", topic=topic,
                            upstream_topic="orders", partition=0, record_count=1, byte_count=1,
                            records_lag=lag, source_end_offset=end, upstream_offset=end - lag - 1,
                            target_offset=7)


def test_latest_values_never_go_back_in_time(sink: RedisRollupSink):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    key = layout.partition_latest_key("west", "east", topic)
    sink.write([row(HOUR, 1, 100, 100, 100, 100, metric="source_end_offset", topic=topic),
                latest_row(partition_report(HOUR + 5000, topic, 100, 0), HOUR, topic, 0)], batch_id=0)
    assert layout.decode_latest(sink.client.hget(key, "0"))["lag_seconds"] == 0.0
    newer = partition_report(HOUR + 25_000, topic, 300, 150)
    sink.write([row(HOUR + 10_000, 1, 200, 200, 200, 200, metric="source_end_offset", topic=topic),
                row(HOUR + 20_000, 1, 300, 300, 300, 300, metric="source_end_offset", topic=topic),
                latest_row(newer, HOUR + 20_000, topic, 0)], batch_id=1)
    value = layout.decode_latest(sink.client.hget(key, "0"))
    # Next offset to replicate 150: half-way between 100 (HOUR+5 s) and 200 (HOUR+15 s) -> 15 s ago.
    assert value == {"ts": HOUR + 25_000, "records_lag": 150, "lag_seconds": pytest.approx(15.0),
                     "source_end_offset": 300, "upstream_offset": 149, "target_offset": 7}
    sink.write([latest_row(partition_report(HOUR + 15_000, topic, 200, 0), HOUR + 10_000, topic, 0)],
               batch_id=2)  # a late report
    assert layout.decode_latest(sink.client.hget(key, "0"))["ts"] == HOUR + 25_000


def test_replication_counts_follow_windows_that_come_after_the_report(sink: RedisRollupSink):
    source = f"s{uuid.uuid4().hex[:6]}"
    report = ReplicationMetrics(ts=HOUR + 20_000, period_ms=10_000, source=source, target="west",
                                status="RUNNING", workers=1, tasks=2, topics_replicated=3)
    replication = latest_row(report, HOUR + 20_000, layout.ALL_TOPICS, layout.WHOLE_TOPIC)
    sink.write([Row(**{**replication.asDict(), "source": source})], batch_id=0)
    key = layout.replication_status_key("west", source)
    assert layout.decode_latest(sink.client.hget(key, "replication"))["recent_record_counts"][-1] == 0
    # The partition records of the same report arrive in the next batch (another Kafka partition).
    counts = Row(**{**row(HOUR + 20_000, 2, 9, 4, 5, 5, topic=layout.ALL_TOPICS,
                          partition=layout.WHOLE_TOPIC).asDict(), "source": source, "upstream_topic": None})
    sink.write([counts], batch_id=1)
    value = layout.decode_latest(sink.client.hget(key, "replication"))
    assert value["recent_record_counts"][-3:] == [0, 0, 9]
    assert (value["status"], value["tasks"], value["topics_replicated"]) == ("RUNNING", 2, 3)


def test_invalid_records_are_counted_once_per_window(sink: RedisRollupSink):
    source = f"s{uuid.uuid4().hex[:6]}"

    def invalid(start: int, count: int, last_offset: int) -> Row:
        return Row(target="west", source=source, topic=layout.ALL_TOPICS, upstream_topic=None, group="",
                   partition=0, metric=layout.INVALID_RECORDS_METRIC, window_start=start, count=float(count),
                   sum=float(count), min=0.0, max=float(last_offset), last=float(last_offset), payload="junk")

    total = layout.invalid_records_key("west", source)
    sink.write([invalid(HOUR, 2, 1)], batch_id=0)
    sink.write([invalid(HOUR, 3, 2), invalid(HOUR + 10_000, 1, 3)], batch_id=1)  # the window grew
    assert int(sink.client.get(total)) == 4
    sink.write([invalid(HOUR, 3, 2)], batch_id=2)  # the same window again, absolute value
    assert int(sink.client.get(total)) == 4
    key = layout.series_key(layout.SeriesId("west", source, layout.ALL_TOPICS, 0,
                                            layout.INVALID_RECORDS_METRIC), "1m")
    assert [layout.decode_member(m).count for m in sink.client.zrange(key, 0, -1)] == [4]


@pytest.mark.parametrize("window", list(layout.WINDOWS))
def test_each_window_size_keeps_its_own_retention(sink: RedisRollupSink, window: str):
    topic = f"east.t{uuid.uuid4().hex[:6]}"
    spec = layout.WINDOWS[window]
    later = HOUR + spec.retention_ms + spec.size_ms
    sink.write([row(HOUR, 1, 1, 1, 1, 1, topic=topic)], batch_id=0)
    sink.write([row(later, 1, 2, 2, 2, 2, topic=topic)], batch_id=1)
    starts = {w: [m.start_ms for m in members(sink.client, w, topic=topic)] for w in layout.WINDOWS}
    assert starts[window] == [layout.window_start(later, window)]
    for coarser in list(layout.WINDOWS)[list(layout.WINDOWS).index(window) + 1:]:
        assert len(starts[coarser]) == 2, f"{coarser} windows outlive the {window} retention"
    for name in layout.WINDOWS:
        key = layout.series_key(layout.SeriesId("west", "east", topic, 0, "record_count"), name)
        assert 0 < sink.client.pttl(key) <= layout.key_ttl_ms(name)
    index = layout.partitions_key("west", "east", topic)
    assert 0 < sink.client.pttl(index) <= layout.INDEX_TTL_MS
