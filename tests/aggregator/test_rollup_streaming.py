"""The rollup query end to end on real Kafka, Spark (the shared session) and Redis."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # pa.compute
import pytest
import redis
from pyspark.sql.streaming.listener import QueryProgressEvent

from aggregator import redis_sink
from aggregator.partition_partials import CollectedParts, collect
from aggregator.query import LOCAL_CHECKPOINT_MANAGER, RollupQuerySpec, sink_of, start_rollup_query
from contract import redis_layout as layout
from contract.records.raw_metrics import GroupMetrics, LatencySummary, PartitionMetrics, ReplicationMetrics
from contract.replication_policy import metrics_topic
from tests.aggregator.streaming_input import (
    create_topic,
    members,
    new_source,
    produce,
    topic_pattern,
    wait_merged,
    wait_until,
)

pytestmark = pytest.mark.integration

T0 = 1_700_002_800_000  # an hour boundary


def partition_report(source: str, ts: int, partition: int, count: int, end: int, lag: int,
                     topic: str = "east.orders") -> PartitionMetrics:
    return PartitionMetrics(
        ts=ts, period_ms=10_000, source=source, target="west", topic=topic, upstream_topic="orders",
        partition=partition, record_count=count, byte_count=10 * count,
        replication_latency_ms=LatencySummary(1, 9, 5, 9, count) if count else None,
        records_lag=lag, source_end_offset=end, upstream_offset=end - lag - 1, target_offset=end - lag - 1)


def spec(tmp_path: Path, bootstrap: str, redis_url: str, *sources: str, target: str = "west",
         watermark_ms: int = 3_600_000) -> RollupQuerySpec:
    return RollupQuerySpec(target=target, bootstrap_servers=bootstrap, redis_url=redis_url,
                           checkpoint_dir=str(tmp_path / "checkpoints"), trigger_interval="500 milliseconds",
                           watermark_delay_ms=watermark_ms, topics_pattern=topic_pattern(*sources))


def run_once(spark, query_spec: RollupQuerySpec) -> None:
    query = start_rollup_query(spark, query_spec)
    try:
        query.processAllAvailable()
        assert query.isActive, query.exception()
        wait_merged(query_spec.redis_url, query)
    finally:
        query.stop()


def test_known_input_gives_exactly_the_expected_rollups(spark, kafka_clusters, redis_url, tmp_path):
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    records = [
        partition_report(source, T0 + 5_000, 0, 10, end=100, lag=0),
        partition_report(source, T0 + 5_000, 1, 4, end=40, lag=0),
        partition_report(source, T0 + 15_000, 0, 20, end=200, lag=0),
        partition_report(source, T0 + 25_000, 0, 0, end=300, lag=150),  # stalled: 150 behind
        partition_report(source, T0 + 65_000, 1, 6, end=46, lag=0),  # next minute
        GroupMetrics(ts=T0 + 26_000, period_ms=10_000, source=source, target="west", group="billing",
                     topic="east.orders", upstream_topic="orders", partition=0, group_upstream_offset=150,
                     group_downstream_offset=140, group_lag=150),
        ReplicationMetrics(ts=T0 + 25_000, period_ms=10_000, source=source, target="west", status="RUNNING",
                           workers=1, tasks=2, last_heartbeat_ts=T0 + 24_000, topics_replicated=1),
    ]
    produce(west, source, records[:3] + [b"\x00 not a record"] + records[3:], garbage_ts_ms=T0 + 20_000)
    run_once(spark, spec(tmp_path, west, redis_url, source))

    client = redis.Redis.from_url(redis_url)
    series = layout.SeriesId("west", source, "east.orders", 0, "record_count")
    assert [(m.start_ms, m.count, m.sum) for m in members(client, series, "10s")] == [
        (T0, 1, 10), (T0 + 10_000, 1, 20), (T0 + 20_000, 1, 0)]
    assert members(client, series, "1m") == [layout.WindowAggregate(T0, 3, 30, 0, 20, 0)]
    topic = layout.SeriesId("west", source, "east.orders", layout.WHOLE_TOPIC, "record_count")
    assert [(m.start_ms, m.sum) for m in members(client, topic, "1m")] == [(T0, 34), (T0 + 60_000, 6)]
    whole = layout.SeriesId("west", source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "byte_count")
    assert [(m.start_ms, m.sum) for m in members(client, whole, "1h")] == [(T0, 400)]
    latency = layout.SeriesId("west", source, "east.orders", 0, "replication_latency_ms")
    assert [(m.count, m.sum, m.min, m.max) for m in members(client, latency, "1h")] == [(30, 150, 1, 9)]

    partition_key = layout.partition_latest_key("west", source, "east.orders")
    partition = layout.decode_latest(client.hget(partition_key, "0"))
    # Next offset to replicate 150: half-way from 100 (T0+5 s) to 200 (T0+15 s), 15 s before the report.
    assert partition == {"ts": T0 + 25_000, "records_lag": 150, "lag_seconds": pytest.approx(15.0),
                         "source_end_offset": 300, "upstream_offset": 149, "target_offset": 149}
    group = layout.decode_latest(client.hget(layout.group_latest_key("west", source, "billing"),
                                             layout.group_latest_field("east.orders", 0)))
    assert group == {"ts": T0 + 26_000, "group_lag": 150, "lag_seconds": pytest.approx(16.0),
                     "upstream_offset": 150, "downstream_offset": 140}
    replication_key = layout.replication_status_key("west", source)
    replication = layout.decode_latest(client.hget(replication_key, "replication"))
    assert replication["recent_record_counts"][-3:] == [14, 20, 0]
    assert (replication["status"], replication["tasks"], replication["last_heartbeat_ts"]) == (
        "RUNNING", 2, T0 + 24_000)

    # The lag verdict of the newest report (at T0 + 25 s): 150 behind, its offset back below the last one.
    verdict = layout.decode_latest(client.hget(layout.lag_verdicts_key("west", source), "east.orders|0"))
    assert (verdict["ts"], verdict["reason"], verdict["current_lag"]) == (T0 + 25_000, "REWIND", 150)
    assert verdict["end"] == [T0 + 20_000, 149, 150]
    # Judged at the aggregator's clock, long after T0: every observation has left the lookback.
    lag = layout.decode_latest(client.hget(replication_key, "lag"))
    assert (lag["partitions"], lag["status"]) == (0, "NOTFOUND")

    assert int(client.get(layout.invalid_records_key("west", source))) == 1
    assert client.smembers(layout.partitions_key("west", source, "east.orders")) == {b"0", b"1"}
    assert client.smembers(layout.groups_key("west", source)) == {b"billing"}


def test_late_records_within_the_watermark_count_later_ones_do_not(spark, kafka_clusters, redis_url,
                                                                   tmp_path):
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    query_spec = spec(tmp_path, west, redis_url, source, watermark_ms=20_000)
    produce(west, source, [partition_report(source, T0 + 100_000, 0, 1, end=1, lag=0)])
    query = start_rollup_query(spark, query_spec)
    try:
        query.processAllAvailable()  # watermark now T0 + 80 s, kept with the committed batch
        state = redis.Redis.from_url(redis_url).hgetall(layout.batch_key(f"{query.name}:{query.id}"))
        assert int(state[b"max_event_ts"]) == T0 + 100_000
        produce(west, source, [partition_report(source, T0 + 85_000, 0, 2, end=3, lag=0),  # within
                               partition_report(source, T0 + 55_000, 0, 4, end=7, lag=0)])  # too late
        query.processAllAvailable()
        assert query.isActive, query.exception()
        wait_merged(query_spec.redis_url, query)
    finally:
        query.stop()
    client = redis.Redis.from_url(redis_url)
    series = layout.SeriesId("west", source, "east.orders", 0, "record_count")
    assert [(m.start_ms, m.sum) for m in members(client, series, "10s")] == [(T0 + 80_000, 2),
                                                                            (T0 + 100_000, 1)]
    assert int(client.get(layout.late_records_key("west", source))) == 1  # counted apart, in no window


def test_the_sink_closer_hears_a_query_end_but_takes_no_progress_report_into_python(
        spark, kafka_clusters, redis_url, tmp_path, monkeypatch):
    # PySpark's own listener adapter made a Python progress report each batch through ~50 JVM calls.
    converted = []
    original = QueryProgressEvent.fromJObject.__func__
    monkeypatch.setattr(QueryProgressEvent, "fromJObject",
                        classmethod(lambda cls, jevent: converted.append(1) or original(cls, jevent)))
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    produce(west, source, [partition_report(source, T0, 0, 1, end=1, lag=0)])
    query = start_rollup_query(spark, spec(tmp_path, west, redis_url, source))
    query.processAllAvailable()
    produce(west, source, [partition_report(source, T0 + 1_000, 0, 1, end=2, lag=0)])
    query.processAllAvailable()
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 2
    assert sink_of(spark, query) is not None
    query.stop()
    wait_until(lambda: sink_of(spark, query) is None, 90, "the closer hearing of the query's end")
    assert converted == []


def test_local_checkpoint_logs_are_written_through_the_file_system_api(spark, kafka_clusters, redis_url,
                                                                       tmp_path):
    # Spark's default for a local disk, FileContext, spawns chmod and readlink from the JVM for each log file.
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source))
    produce(west, source, [partition_report(source, T0, 0, 1, end=1, lag=0)])
    query = start_rollup_query(spark, spec(tmp_path, west, redis_url, source))
    try:
        query.processAllAvailable()
        execution = query._jsq.streamingQuery()
        for log in (execution.offsetLog(), execution.commitLog()):
            assert log.fileManager().getClass().getName() == LOCAL_CHECKPOINT_MANAGER
        assert execution.commitLog().getLatest().isDefined()  # and the commit log was written with it
    finally:
        query.stop()


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_partials_are_computed_in_executor_python_workers_not_in_the_driver(spark, kafka_clusters, redis_url,
                                                                           tmp_path, monkeypatch):
    source, west = new_source(), kafka_clusters["west"]
    # What the sink collected from the tasks, seen as it is collected (the sink keeps none of it after the
    # batch: at 100,000 series a batch's partials are ~120 MB).
    seen: list[CollectedParts] = []

    def collect_seen(parts: pa.Table) -> CollectedParts:
        seen.append(collect(parts))
        return seen[-1]

    monkeypatch.setattr(redis_sink, "collect", collect_seen)
    create_topic(west, metrics_topic(source), partitions=2)
    for kafka_partition in (0, 1):
        produce(west, source, [partition_report(source, T0 + k * 1_000, kafka_partition, k, end=k, lag=0)
                               for k in range(50)], partition=kafka_partition)
    query = start_rollup_query(spark, spec(tmp_path, west, redis_url, source))
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    collected, = [c for c in seen if source in c.partials.windows["source"].to_pylist()]
    # One task per Kafka partition, each answering with its partials from a Python worker of Spark's.
    assert collected.records == 100 and collected.tasks == 2
    assert collected.worker_pids and os.getpid() not in collected.worker_pids
    for pid in collected.worker_pids:
        # local[2]: the executor is the JVM this process started; it forks its Python workers from
        # pyspark.daemon. The worker's ancestry reaches the driver only through that JVM.
        assert "pyspark.daemon" in command_of(pid), command_of(pid)
        ancestors = [parent_of(pid)]
        while ancestors[-1] not in (os.getpid(), 1):
            ancestors.append(parent_of(ancestors[-1]))
        assert ancestors[-1] == os.getpid()
        assert any("java" in command_of(a).split()[0] for a in ancestors[:-1]), ancestors
    # Only partials crossed: 2 partitions x 5 windows + 5 whole-topic + 5 replication-level rows (the
    # sink adds lag-in-seconds rows of its own, derived from the latest values).
    windows = collected.partials.windows
    assert windows.filter(pa.compute.is_valid(windows["record_count__n"])).num_rows == 20
