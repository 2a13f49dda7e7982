"""Poison in `srm-metrics.<src>.internal`, through real Kafka, Spark and Redis: the rollups go on.

Before: ``b"[" * 3000`` raised RecursionError in the sink, the batch failed, and the supervisor replayed
it forever; NaN latencies reached the stored windows as `sum=nan`; a topic named `*` merged into the
replication-wide series; a record stamped 50 minutes ahead (ts and CreateTime alike) moved the watermark
as far ahead, and every on-time record after it was dropped as late. And (issue 39) a well-formed
record with an integer past float64's exact range (2^53 + 1) failed the executor's task, so the batch,
at every replay; avg 1e308 x count 10 made a window's sum infinite; a writer of the topic could report
as another source, and mint unlimited topic, partition and group subjects.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import pytest
import redis

from aggregator.query import start_rollup_query
from contract import redis_layout as layout
from contract.records import raw_metrics
from contract.replication_policy import metrics_topic
from service.app import create_app
from tests.aggregator.streaming_input import create_topic, members, new_source, produce, wait_merged
from tests.aggregator.test_rollup_streaming import T0, partition_report, run_once, spec

pytestmark = pytest.mark.integration


def _edited(record: raw_metrics.RawMetrics, **fields: object) -> bytes:
    """The record's value with fields replaced (json writes float('nan') as NaN, as a buggy producer)."""
    return json.dumps(json.loads(raw_metrics.encode(record)[1]) | fields).encode()


def test_poison_records_are_counted_and_the_rollups_keep_growing(spark, kafka_clusters, redis_url, tmp_path):
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    nan_latency = _edited(partition_report(source, T0 + 6_000, 0, 5, end=105, lag=0),
                          replication_latency_ms={"min": 1, "max": 9, "avg": float("nan"), "last": 9,
                                                  "count": 5})
    star_topic = _edited(partition_report(source, T0 + 7_000, 0, 1000, end=1100, lag=0), topic="*")
    past_exact = _edited(partition_report(source, T0 + 7_000, 0, 1000, end=1100, lag=0),
                         record_count=2**53 + 1)
    huge_latency = _edited(partition_report(source, T0 + 8_000, 0, 10, end=100, lag=0),
                           replication_latency_ms={"min": 1, "max": 9, "avg": 1e308, "last": 9, "count": 10})
    forged = _edited(partition_report(source, T0 + 8_000, 0, 1000, end=1100, lag=0), source="forged")
    first, second = (partition_report(source, T0 + 5_000, 0, 10, end=100, lag=0),
                     partition_report(source, T0 + 15_000, 0, 20, end=200, lag=0))
    poison = [b"[" * 3000, nan_latency, star_topic, past_exact, huge_latency, forged]
    produce(west, source, [first, *poison, second], garbage_ts_ms=T0 + 10_000)
    query_spec = spec(tmp_path, west, redis_url, source)
    run_once(spark, query_spec)  # asserts the query is still active

    client = redis.Redis.from_url(redis_url)
    series = layout.SeriesId("west", source, "east.orders", 0, "record_count")
    assert [(m.start_ms, m.sum) for m in members(client, series, "10s")] == [(T0, 10), (T0 + 10_000, 20)]
    assert int(client.get(layout.invalid_records_key("west", source))) == 6
    assert client.get(layout.invalid_records_key("west", "forged")) is None  # counted as its topic's
    whole = layout.SeriesId("west", source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "record_count")
    assert [m.sum for m in members(client, whole, "1h")] == [30]  # no 1000 of `*`, 2^53 + 1 or forged
    latency = layout.SeriesId("west", source, "east.orders", 0, "replication_latency_ms")
    assert all(math.isfinite(m.sum) for m in members(client, latency, "1h"))

    produce(west, source, [partition_report(source, T0 + 25_000, 0, 30, end=300, lag=0)])
    run_once(spark, query_spec)  # the same checkpoint: the query goes on from where it was
    assert [(m.start_ms, m.sum) for m in members(client, series, "10s")][-1] == (T0 + 20_000, 30)


def test_a_record_from_the_future_does_not_make_on_time_records_late(spark, kafka_clusters, redis_url,
                                                                     tmp_path):
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    now = int(time.time() * 1000)
    # A producer whose clock jumped 50 minutes: ts and CreateTime both ahead (Kafka 4 brokers refuse
    # CreateTime more than an hour ahead, log.message.timestamp.after.max.ms; the ts field has no limit).
    ahead = now + 50 * 60_000
    future = raw_metrics.encode(partition_report(source, ahead, 0, 1, end=1, lag=0))[1]
    query_spec = spec(tmp_path, west, redis_url, source, watermark_ms=30_000)
    query = start_rollup_query(spark, query_spec)
    try:
        produce(west, source, [future], garbage_ts_ms=ahead)
        query.processAllAvailable()
        on_time_ts = int(time.time() * 1000)
        produce(west, source, [partition_report(source, on_time_ts, 0, 2, end=3, lag=0)])
        query.processAllAvailable()
        assert query.isActive, query.exception()
        wait_merged(query_spec.redis_url, query)
        state = redis.Redis.from_url(redis_url).hgetall(layout.batch_key(f"{query.name}:{query.id}"))
    finally:
        query.stop()
    client = redis.Redis.from_url(redis_url)
    series = layout.SeriesId("west", source, "east.orders", 0, "record_count")
    window = on_time_ts // 10_000 * 10_000
    assert [(m.start_ms, m.sum) for m in members(client, series, "10s")] == [(window, 2)]
    assert int(client.get(layout.late_records_key("west", source)) or 0) == 0
    assert int(client.get(layout.invalid_records_key("west", source))) == 1
    assert int(state[b"max_event_ts"]) <= int(time.time() * 1000)


def test_a_writer_of_the_metrics_topic_mints_no_more_subjects_than_the_cap(spark, kafka_clusters, redis_url,
                                                                             tmp_path):
    """Before: every new topic, partition or group name a writer of the topic made was a new set of
    series, with no bound. Now a replication keeps at most aggregator.max.subjects.per.replication; the
    rest are refused and counted at the service's /metrics."""
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    query_spec = replace(spec(tmp_path, west, redis_url, source), max_subjects_per_replication=6)
    # east.orders partitions 0-2 and the whole topic: 4 subjects
    produce(west, source, [partition_report(source, T0 + 5_000, p, 10, end=100, lag=0) for p in range(3)])
    run_once(spark, query_spec)
    # 20 new topics of a partition each: 40 subjects, of which 2 fit
    minted = [partition_report(source, T0 + 15_000, 0, 1, end=1, lag=0, topic=f"east.minted{i:02}")
              for i in range(20)]
    produce(west, source, [*minted, partition_report(source, T0 + 15_000, 1, 5, end=105, lag=0)])
    run_once(spark, query_spec)

    client = redis.Redis.from_url(redis_url)
    kept = {m.decode() for m in client.zrange(layout.subjects_key("west", source), 0, -1)}
    assert len(kept) == 6 and {f"east.orders|{p}|" for p in (-1, 0, 1, 2)} <= kept
    assert int(client.get(layout.refused_subjects_key("west", source))) == 38
    minted_series = [k for k in client.scan_iter(match=f"{layout.PREFIX}:wh:*minted*", count=1000)]
    assert {k.decode().split("|")[2].split("}")[0] for k in minted_series} <= {m.split("|")[0] for m in kept}
    orders = layout.SeriesId("west", source, "east.orders", 1, "record_count")
    assert [m.sum for m in members(client, orders, "1h")] == [15]  # a known subject goes on

    text = create_app({"REDIS_URL": redis_url}).test_client().get("/metrics").get_data(as_text=True)
    pair = f'source="{source}",target="west"'
    assert f"srm_subjects_refused_total{{{pair}}} 38.0" in text
    assert f"srm_replication_subjects{{{pair}}} 6.0" in text
