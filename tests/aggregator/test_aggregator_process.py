"""`python -m aggregator` as a real process: kill -9 mid-batch and a restart leave Redis exactly as an
uninterrupted run does; `spark-submit` on a Spark standalone cluster gives the same rollups as local[2].

One input and one reference run (the shared local[2] session, one batch) serve both tests.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
import redis

from aggregator import kafka_connector
from aggregator.query import RollupQuerySpec, start_rollup_query
from contract import redis_layout as layout
from contract.records.raw_metrics import GroupMetrics, LatencySummary, PartitionMetrics, ReplicationMetrics
from contract.replication_policy import metrics_topic
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.redis_server import RedisServer
from tests.aggregator.streaming_input import (
    WORKING_STATE,
    create_topic,
    new_source,
    produce,
    snapshot,
    topic_pattern,
    wait_merged,
    wait_until,
)

pytestmark = pytest.mark.integration

T0 = 1_700_002_800_000
PERIODS = 36  # six minutes of 10 s reports
PARTITIONS = 3
KAFKA_PARTITIONS = 2  # of the raw-metrics topic: one Spark task each
SPARK_HOME = Path(pyspark.__file__).parent


def raw_input(source: str) -> list:
    records: list = []
    ends = [0] * PARTITIONS
    for k in range(PERIODS):
        ts = T0 + k * 10_000 + 1_000
        for p in range(PARTITIONS):
            count = (k * (p + 1)) % 7
            ends[p] += count + p
            records.append(PartitionMetrics(
                ts=ts, period_ms=10_000, source=source, target="west", topic="east.orders",
                upstream_topic="orders", partition=p, record_count=count, byte_count=count * 100,
                replication_latency_ms=LatencySummary(k, k + 5, k + 2, k + 1, count) if count else None,
                records_lag=p * 3, source_end_offset=ends[p], upstream_offset=ends[p] - p * 3 - 1,
                target_offset=ends[p] - p * 3 - 1))
        records.append(GroupMetrics(ts=ts, period_ms=10_000, source=source, target="west", group="billing",
                                    topic="east.orders", upstream_topic="orders", partition=0,
                                    group_upstream_offset=max(0, ends[0] - 9), group_downstream_offset=k,
                                    group_lag=min(9, ends[0])))
        records.append(ReplicationMetrics(ts=ts, period_ms=10_000, source=source, target="west",
                                          status="RUNNING", workers=1, tasks=1, topics_replicated=1))
        if k == PERIODS // 2:
            records.append(b"{broken")
    return records


def by_kafka_partition(records: list) -> list[list]:
    """Records as the driver keys them: a topic partition's reports and its groups' in one Kafka partition
    (raw_metrics.placement_key), in order; the replication's in another."""
    parts: list[list] = [[] for _ in range(KAFKA_PARTITIONS)]
    for record in records:
        partition = record.partition if isinstance(record, PartitionMetrics | GroupMetrics) else 1
        parts[partition % KAFKA_PARTITIONS].append(record)
    return parts


@pytest.fixture(scope="module")
def scenario(spark, kafka_clusters, tmp_path_factory) -> Iterator[dict]:
    """The input in Kafka and the Redis content of an uninterrupted local[2] run over it."""
    tmp = tmp_path_factory.mktemp("aggregator-process")
    source, west = new_source(), kafka_clusters["west"]
    create_topic(west, metrics_topic(source), partitions=KAFKA_PARTITIONS)
    # Unparseable records take their event time from Kafka and share the watermark: stamp the broken
    # one in the input's time, or the split runs would drop everything after it as late.
    for kafka_partition, records in enumerate(by_kafka_partition(raw_input(source))):
        produce(west, source, records, partition=kafka_partition, garbage_ts_ms=T0 + PERIODS * 5_000)
    reference = RedisServer(tmp / "redis-reference").start()
    try:
        query = start_rollup_query(spark, RollupQuerySpec(
            target="west", bootstrap_servers=west, redis_url=reference.url,
            checkpoint_dir=str(tmp / "reference-checkpoints"), watermark_delay_ms=3_600_000,
            topics_pattern=topic_pattern(source)))
        try:
            query.processAllAvailable()
            wait_merged(reference.url, query)
        finally:
            query.stop()
        expected = comparable_snapshot(redis.Redis.from_url(reference.url))
        assert len(expected) > 50, "reference run wrote too little to compare"
        yield {"source": source, "expected": expected, "tmp": tmp}
    finally:
        reference.cleanup()


def aggregator_config(path: Path, kafka_clusters: dict[str, str], redis_url: str, source: str,
                      checkpoints: Path, **extra: object) -> Path:
    return srm_properties.write(path, kafka_clusters, [("east", "west")], redis_url, {
        "aggregator.checkpoint.dir": checkpoints, "aggregator.metrics.topics.pattern": topic_pattern(source),
        "aggregator.watermark.delay.seconds": 3600, "aggregator.trigger.interval.ms": 200, **extra})


def mid_batch(checkpoint: Path, at_least: int) -> int | None:
    """A batch whose offsets are logged but not committed yet: the query is inside it."""
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    if not offsets.is_dir():
        return None
    started = {int(p.name) for p in offsets.iterdir() if p.name.isdigit()}
    done = {int(p.name) for p in commits.iterdir() if p.name.isdigit()} if commits.is_dir() else set()
    running = [b for b in started - done if b >= at_least]
    return running[0] if running else None


def comparable_snapshot(client: redis.Redis) -> dict:
    """Every key but the sink's own state and the tasks' offset records (WORKING_STATE), the aggregator's
    probe of its target (a reading of the clock, not of the data) and the lag-in-seconds history. That
    history gets one sample per subject per micro-batch (the batch's newest report, from which the tasks
    derive the figure), so where batches begin and end decides which windows hold a sample: a killed and
    restarted run cuts its batches elsewhere than one uninterrupted run. Its latest values are compared as
    everything else."""
    probes = {layout.cluster_reachability_key("west"), layout.aggregator_restarts_key("west")}

    def excluded(key: str) -> bool:
        return key.startswith(WORKING_STATE) or key in probes
    out = snapshot(client, exclude=excluded)
    for key in [k for k in out if k.startswith(f"{layout.PREFIX}:wh:") and not k.endswith(" (expires)")]:
        newest = [(name, raw) for name, raw in out[key] if name == layout.NEWEST_FIELD.encode()]
        members = [(name, m) for name, raw in out[key]
                   if name != layout.NEWEST_FIELD.encode() and (m := without_lag_seconds(raw)) is not None]
        if members:
            out[key] = members + newest
        else:  # a window set of lag in seconds only
            del out[key], out[f"{key} (expires)"]
    return out


def without_lag_seconds(member: bytes) -> str | None:
    """A window member without its lag-in-seconds metrics (None when it holds nothing else)."""
    start, windows = layout.decode_member(member)
    kept = {m: w for m, w in windows.items() if m not in ("lag_seconds", "group_lag_seconds")}
    return layout.encode_member(start, kept) if kept else None


def wait_for_identical(client: redis.Redis, expected: dict, process: ManagedProcess,
                       timeout_s: float) -> None:
    def same() -> bool:
        assert process.running, f"{process.name} exited:\n{process.log_tail()}"
        return comparable_snapshot(client) == expected
    try:
        wait_until(same, timeout_s, "Redis identical to the uninterrupted run")
    except AssertionError:
        actual = comparable_snapshot(client)
        diff = {k for k in set(actual) | set(expected) if actual.get(k) != expected.get(k)}
        first = sorted(diff)[0]
        raise AssertionError(f"{len(diff)} keys differ, e.g. {first}: {actual.get(first)} != "
                             f"{expected.get(first)}\n{process.log_tail()}") from None


def test_kill_9_mid_batch_and_restart_leaves_redis_identical(scenario, kafka_clusters):
    tmp, source = scenario["tmp"], scenario["source"]
    server = RedisServer(tmp / "redis-killed").start()
    checkpoints = tmp / "killed-checkpoints"
    config = aggregator_config(tmp / "killed.properties", kafka_clusters, server.url, source, checkpoints,
                               **{"aggregator.max.offsets.per.trigger": 15})
    first = ManagedProcess.python_module("aggregator-killed", "aggregator", ["--config", str(config)], tmp)
    second = ManagedProcess.python_module("aggregator-restarted", "aggregator", ["--config", str(config)],
                                          tmp)
    try:
        first.start()
        killed_in = wait_until(lambda: mid_batch(checkpoints / "west", at_least=2), 180, "a batch in flight")
        first.kill()
        assert mid_batch(checkpoints / "west", at_least=2) == killed_in  # it never committed
        assert comparable_snapshot(redis.Redis.from_url(server.url)) != scenario["expected"]
        second.start()
        wait_for_identical(redis.Redis.from_url(server.url), scenario["expected"], second, 180)
    finally:
        first.kill()
        second.stop()
        server.cleanup()


def test_spark_submit_on_a_standalone_cluster_gives_the_same_rollups(scenario, kafka_clusters):
    tmp, source = scenario["tmp"], scenario["source"]
    server = RedisServer(tmp / "redis-cluster").start()
    config = aggregator_config(tmp / "cluster.properties", kafka_clusters, server.url, source,
                               tmp / "cluster-checkpoints")
    port, java = free_port(), os.environ.get("JAVA", "java")
    # The worker builds executor command lines with Spark's launcher, which needs the Scala version
    # (bin/load-spark-env.sh sets it for the scripts; here the JVMs are started directly).
    scala = next(SPARK_HOME.glob("jars/spark-core_*.jar")).name.split("_")[1].split("-")[0]
    env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_SCALA_VERSION": scala, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    classpath = f"{SPARK_HOME}/jars/*"
    master = ManagedProcess("spark-master", [
        java, "-Xmx256m", "-cp", classpath, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
        "--port", str(port), "--webui-port", str(free_port())], tmp / "spark-master.log", env)
    # Two workers of one core each: the batch's two Kafka partitions are parsed and aggregated by
    # executors on both, and the driver merges their partials.
    workers = [ManagedProcess(f"spark-worker-{i}", [
        java, "-Xmx256m", "-cp", classpath, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
        "--host", "127.0.0.1", "--cores", "1", "--memory", "768m", "--webui-port", str(free_port()),
        "--work-dir", str(tmp / f"spark-work-{i}")], tmp / f"spark-worker-{i}.log", env) for i in (1, 2)]
    submit = ManagedProcess("spark-submit", [
        str(SPARK_HOME / "bin" / "spark-submit"), "--master", f"spark://127.0.0.1:{port}",
        "--jars", ",".join(kafka_connector.jars()), "--conf", "spark.executor.memory=512m",
        "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2", "aggregator/__main__.py",
        "--config", str(config)],
        tmp / "spark-submit.log", env)
    try:
        master.start()
        wait_for_port(port, 60, master.process)
        for worker in workers:
            worker.start()
        for worker in workers:
            wait_until(lambda w=worker: "registered with master" in w.log_file.read_text(errors="replace"),
                       60, f"{worker.name} registering")
        submit.start()
        wait_for_identical(redis.Redis.from_url(server.url), scenario["expected"], submit, 240)
        for i, worker in enumerate(workers, 1):  # an executor ran on each worker, with Python workers
            assert "app-" in worker.log_file.read_text(errors="replace")
            assert list((tmp / f"spark-work-{i}").glob("app-*/*/stderr"))
    finally:
        for process in (submit, *workers, master):
            process.stop()
        server.cleanup()
