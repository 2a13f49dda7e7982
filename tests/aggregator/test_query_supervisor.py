"""Two target clusters aggregated independently; a failed query restarts alone from its checkpoint."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest
import redis

from aggregator.query import RollupQuerySpec
from aggregator.scheduler_pools import fair_scheduler_xml
from aggregator.supervisor import QuerySupervisor
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics
from contract.replication_policy import metrics_topic
from stack.redis_server import RedisServer
from tests.aggregator.streaming_input import (
    create_topic,
    members,
    new_source,
    produce,
    topic_pattern,
    wait_until,
)

T0 = 1_700_002_800_000


def report(source: str, target: str, ts: int, count: int) -> PartitionMetrics:
    return PartitionMetrics(ts=ts, period_ms=10_000, source=source, target=target, topic=f"{source}.t",
                            upstream_topic="t", partition=0, record_count=count, byte_count=count)


def test_fair_scheduler_file_declares_one_pool_per_target():
    root = ET.fromstring(fair_scheduler_xml(["east", "we<st"]))
    assert [(p.get("name"), p.findtext("schedulingMode")) for p in root.iter("pool")] == [
        ("east", "FAIR"), ("we<st", "FAIR")]


@pytest.mark.integration
def test_targets_are_independent_and_a_failed_query_restarts_alone(spark, kafka_clusters, redis_url,
                                                                   tmp_path):
    source = new_source()
    flaky_redis = RedisServer(tmp_path / "redis-east").start()
    specs = []
    for target, url in (("east", flaky_redis.url), ("west", redis_url)):
        create_topic(kafka_clusters[target], metrics_topic(source))
        produce(kafka_clusters[target], source, [report(source, target, T0, 1 if target == "east" else 10)])
        specs.append(RollupQuerySpec(target=target, bootstrap_servers=kafka_clusters[target], redis_url=url,
                                     checkpoint_dir=str(tmp_path / "checkpoints"),
                                     trigger_interval="500 milliseconds", watermark_delay_ms=3_600_000,
                                     topics_pattern=topic_pattern(source)))
    east, west = redis.Redis.from_url(flaky_redis.url), redis.Redis.from_url(redis_url)

    def total(client: redis.Redis, target: str) -> float:
        series = layout.SeriesId(target, source, f"{source}.t", 0, "record_count")
        return sum(m.sum for m in members(client, series, "1h"))

    supervisor = QuerySupervisor(spark, specs, backoff_s=0.5).start_all()
    try:
        wait_until(lambda: total(east, "east") == 1 and total(west, "west") == 10, what="first rollups")
        # Each target's series live under its own target, in its own query's Redis.
        assert total(west, "east") == 0 and not east.keys(f"*{{west|{source}*")
        flaky_redis.stop()
        for target in ("east", "west"):
            produce(kafka_clusters[target], source, [report(source, target, T0 + 10_000, 2)])
        wait_until(lambda: not supervisor.queries["rollup_east"].isActive, what="east query failing")
        wait_until(lambda: total(west, "west") == 12, what="west going on while east is down")
        assert supervisor.queries["rollup_west"].isActive
        flaky_redis.start()  # its append-only file brings back the T0 window and the sink state
        wait_until(lambda: supervisor.check() or supervisor.restarts.get("rollup_east"), what="restart")
        # Restarted from its checkpoint: history from before the Redis restart is still there, the batch
        # that failed is replayed once, and nothing is counted twice (1 + 2, not 1 + 1 + 2).
        wait_until(lambda: total(east, "east") == 3, what="east catching up")
        time.sleep(2)  # a few more triggers: a batch merged twice would show now
        assert total(east, "east") == 3
        assert supervisor.restarts == {"rollup_east": 1}
        assert supervisor.rebuilds == {}  # Redis came back with its state (AOF): nothing to rebuild
    finally:
        supervisor.stop_all()
        flaky_redis.cleanup()
