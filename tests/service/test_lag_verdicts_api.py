"""Replication status from the aggregator's lag verdicts (contract.lag_verdicts) on a real Redis.

Raw reports go through the aggregator's write path (parse, partials, sink); the status the service then
answers from one summary per replication must be the one it answers from every partition's offset windows
(the evaluation it made before the verdicts existed, and still makes for rollups without them).
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest
import redis

from aggregator.partition_partials import PARTS_SCHEMA, collect
from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout
from contract.lag_verdicts import verdict_field
from contract.records import raw_metrics
from contract.records.raw_metrics import PartitionMetrics, ReplicationMetrics
from contract.replication_policy import metrics_topic
from service.app import create_app
from service.health.replication_overview import replication_healths
from service.metrics_reader import MetricsReader

pytestmark = pytest.mark.integration

PERIOD_MS = 30_000
PERIODS = 12
TOPICS, PARTITIONS = 3, 2


def reports(source: str, target: str, ts: int, period: int) -> list[bytes]:
    """Topic 0 falls behind more every period (WARN), topic 1 partition 0 stands still behind (STALL),
    the rest keep up."""
    out = []
    for topic in range(TOPICS):
        for partition in range(PARTITIONS):
            end = 1_000 + 100 * period
            lag = 5 * (period + 1) if topic == 0 else 40 if (topic, partition) == (1, 0) else 0
            upstream = 500 if (topic, partition) == (1, 0) else end - lag
            out.append(raw_metrics.encode(PartitionMetrics(
                ts, PERIOD_MS, source, target, f"{source}.t{topic}", f"t{topic}", partition, 100, 1_000,
                records_lag=lag, source_end_offset=end if (topic, partition) != (1, 0) else upstream + lag,
                upstream_offset=upstream, target_offset=upstream))[1])
    report = ReplicationMetrics(ts, PERIOD_MS, source, target, "RUNNING", workers=1, tasks=1,
                                last_heartbeat_ts=ts, topics_replicated=TOPICS)
    out.append(raw_metrics.encode(report)[1])
    return out


def write_batch(sink: RedisRollupSink, source: str, values: list[bytes], ts: int, batch_id: int) -> None:
    """One micro-batch as the streaming sink runs it, without Spark: Kafka columns -> map side -> sink."""
    kafka = pa.table({"topic": [metrics_topic(source)] * len(values),
                      "partition": pa.array([0] * len(values), pa.int32()),
                      "offset": pa.array(range(len(values)), pa.int64()),
                      "kafka_ts": pa.array([ts] * len(values), pa.int64()),
                      "value": pa.array(values, pa.binary())})
    state = sink.state()
    now_ms = int(time.time() * 1000)
    mapper = sink.task_function(state, now_ms)
    parts = pa.Table.from_batches(list(mapper(iter(kafka.to_batches()))), schema=PARTS_SCHEMA)
    sink.write(collect(parts).partials, batch_id, state)


@pytest.fixture
def replication(redis_url: str) -> tuple[str, str, int]:
    """(source, target, newest report ts) of a replication whose reports came through the sink."""
    uid = uuid.uuid4().hex[:6]
    source, target = f"east{uid}", f"west{uid}"
    sink = RedisRollupSink(redis_url, f"verdicts_{uid}", target=target)
    last = int(time.time() * 1000) - 1_000
    for period in range(PERIODS):
        ts = last - (PERIODS - 1 - period) * PERIOD_MS
        write_batch(sink, source, reports(source, target, ts, period), ts, period)
    sink.close()
    return source, target, last


def forget_verdicts(redis_url: str, source: str, target: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.hdel(layout.replication_status_key(target, source), "lag")
    client.delete(layout.lag_verdicts_key(target, source))
    client.close()


def status(redis_url: str, source: str, target: str, every: bool) -> dict:
    client = create_app({"REDIS_URL": redis_url}).test_client()
    answer = client.get(f"/v2/replications/{source}/{target}", query_string={"all": str(every).lower()})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.get_json()
    return {k: body[k] for k in ("state", "lag", "lag_seconds", "topics")}


def test_the_aggregator_writes_a_verdict_per_partition_and_a_summary(redis_url, replication):
    source, target, last = replication
    client = redis.Redis.from_url(redis_url)
    verdicts = client.hgetall(layout.lag_verdicts_key(target, source))
    summary = layout.decode_latest(client.hget(layout.replication_status_key(target, source), "lag"))
    client.close()
    assert sorted(f.decode() for f in verdicts) == sorted(
        verdict_field(f"{source}.t{t}", p) for t in range(TOPICS) for p in range(PARTITIONS))
    assert summary["ts"] >= last and summary["partitions"] == TOPICS * PARTITIONS
    assert (summary["status"], summary["reason"]) == ("ERR", "STALL")
    assert {(p["topic"], p["partition"], p["reason"]) for p in summary["problems"]} == {
        (f"{source}.t0", 0, "WARN"), (f"{source}.t0", 1, "WARN"), (f"{source}.t1", 0, "STALL")}
    assert summary["total_lag"] == 2 * 5 * PERIODS + 40
    assert summary["valid_until_ms"] > last + 90_000  # lagging partitions turn STOP only after a silence


@pytest.mark.parametrize("every", [False, True])
def test_status_from_the_verdicts_is_the_status_from_every_partitions_windows(redis_url, replication, every):
    source, target, _ = replication
    from_verdicts = status(redis_url, source, target, every)
    forget_verdicts(redis_url, source, target)
    from_windows = status(redis_url, source, target, every)
    assert from_verdicts["lag"]["status"] == "ERR" and len(from_verdicts["lag"]["partitions"]) == (
        TOPICS * PARTITIONS if every else 3)
    assert from_verdicts == from_windows


def test_partitions_that_stop_reporting_turn_stop_as_from_their_windows(redis_url, replication):
    source, target, last = replication
    reader = MetricsReader(redis.Redis.from_url(redis_url))
    later = last + 5 * 60_000  # past the STOP bound (the window spans 9 periods), within the lookback
    [rep] = reader.replications([(source, target)])
    from_verdicts = replication_healths(reader, [rep], later, every_partition=True)[0].lag
    forget_verdicts(redis_url, source, target)
    from_windows = replication_healths(reader, [rep], later, every_partition=True)[0].lag
    assert from_verdicts.reason == "STOP" and from_verdicts == from_windows
    assert {(p.topic, p.partition) for p in from_verdicts.partitions if p.reason == "STOP"} == {
        (f"{source}.t0", 0), (f"{source}.t0", 1), (f"{source}.t1", 0)}


def test_a_restarted_aggregator_summarises_partitions_it_has_not_met_yet(redis_url, replication):
    source, target, last = replication
    sink = RedisRollupSink(redis_url, f"verdicts_restart_{uuid.uuid4().hex[:6]}", target=target)
    ts = last + 500
    one = [v for v in reports(source, target, ts, PERIODS) if b'"partition":0' in v and b".t2" in v]
    write_batch(sink, source, one, ts, 0)
    sink.close()
    client = redis.Redis.from_url(redis_url)
    summary = layout.decode_latest(client.hget(layout.replication_status_key(target, source), "lag"))
    client.close()
    assert summary["ts"] >= ts and summary["partitions"] == TOPICS * PARTITIONS
    assert summary["reason"] == "STALL"
