"""The rollup sink on a real Redis: coarser windows derived exactly, replays change nothing."""

from __future__ import annotations

import uuid

import pytest
import redis
from pyspark.sql import Row

from aggregator import redis_layout as layout
from aggregator.redis_sink import RedisRollupSink

pytestmark = pytest.mark.integration

HOUR = 1_700_002_800_000  # an hour boundary


def row(start_ms: int, count: float, total: float, low: float, high: float, last: float,
        partition: int = 0, metric: str = "record_count", topic: str = "east.orders") -> Row:
    return Row(target="west", source="east", topic=topic, upstream_topic="orders", group="",
               partition=partition, metric=metric, window_start=start_ms, count=count, sum=total,
               min=low, max=high, last=last)


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
