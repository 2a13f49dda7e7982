"""Finds a rollup query's Redis state gone while its checkpoint has progress, and rebuilds from Kafka.

Redis flushed, replaced by an empty one, or restarted without its append-only file: the rollups and the
exactly-once state (redis_sink, window_writer) are gone, but the query's Spark checkpoint says which
raw-metrics offsets were done, so resuming from it would roll up only what arrives from now on, though
the raw-metrics topics still hold their retention's worth. The state is gone when the checkpoint has a
committed batch (the sink writes its state into Redis before Spark commits a batch) and Redis has no
sink state for the checkpoint's query id. A new deployment (no committed batch) and a Redis restarted
from its append-only file (the state is back) are not rebuilt.

A rebuild clears what the query wrote for its target since the loss (a batch in flight, redis_layout
.target_rollup_patterns), moves the checkpoint aside (kept, renamed `<dir>.lost-<UTC time>`) and starts
the query again on a new checkpoint, which reads from the earliest offsets Kafka retains: what the
topics hold is rolled up once. The rebuild record (redis_layout.rebuild_key) says when; the rebuilt
query's first batch adds where its history starts, which the service shows in the replications'
status, since history older than Kafka's retention is lost.

The checkpoint is read and moved through Hadoop's FileSystem, so a checkpoint on HDFS or an object
store is handled as a local one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import cast

import redis
from py4j.java_gateway import JavaObject
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aggregator.query import RollupQuerySpec, sink_of
from aggregator.redis_sink import query_scope
from clients import redis_connection
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

# How often a running query's state is looked for in Redis; a batch finding it gone says so at once.
CHECK_INTERVAL_S = 5.0
# Redis calls of the check: short, so the supervisor's loop does not wait on a hung Redis for long.
CHECK_TIMEOUT_S = 2.0
# A stopped query's sink finishes the batch it is in (a query's stop may give up on it) before the target's
# keys are cleared.
BATCH_WAIT_S = 30.0


def checkpoint_location(spec: RollupQuerySpec) -> str:
    return f"{spec.checkpoint_dir}/{spec.target}"


@dataclass
class RedisStateCheck:
    """Whether a query's sink state is gone from Redis while its checkpoint has progress."""

    spark: SparkSession
    interval_s: float = CHECK_INTERVAL_S
    _checked: dict[str, float] = field(default_factory=dict)
    _clients: dict[str, redis.Redis] = field(default_factory=dict)

    def client(self, spec: RollupQuerySpec) -> redis.Redis:
        if spec.redis_url not in self._clients:
            self._clients[spec.redis_url] = redis_connection.connect(spec.redis_url, CHECK_TIMEOUT_S,
                                                                     CHECK_TIMEOUT_S)
        return self._clients[spec.redis_url]

    def state_gone(self, spec: RollupQuerySpec, query: StreamingQuery, now: float, at_once: bool = False
                   ) -> bool:
        """Checked every `interval_s` (or `at_once`); a Redis that does not answer tells nothing."""
        sink = sink_of(self.spark, query)
        if sink is not None and sink.state_lost:  # a batch found it: no need to ask Redis
            return True
        if not at_once and now < self._checked.get(spec.query_name, 0.0) + self.interval_s:
            return False
        self._checked[spec.query_name] = now
        # The checkpoint first: a batch it shows committed had its state written before, so a batch
        # committing between the two reads is not mistaken for a loss.
        if not checkpoint_has_progress(self.spark, checkpoint_location(spec)):
            return False
        try:
            return not self.client(spec).exists(layout.batch_key(query_scope(spec.query_name, str(query.id))))
        except redis.RedisError:
            return False


def checkpoint_has_progress(spark: SparkSession, location: str) -> bool:
    """Whether Spark committed a batch in the checkpoint (a file named by its batch id in `commits`)."""
    commits, fs = _hadoop_path(spark, f"{location}/commits")
    if not fs.exists(commits):
        return False
    return any(status.getPath().getName().isdigit() for status in fs.listStatus(commits))


def set_checkpoint_aside(spark: SparkSession, location: str, aside: str) -> str:
    """Renames the checkpoint to `aside` (`aside-2`, … when taken: a rename into an existing directory
    would nest it there); returns the name it got."""
    source, fs = _hadoop_path(spark, location)
    if not fs.exists(source):
        return aside
    name, n = aside, 1
    while fs.exists(_hadoop_path(spark, name)[0]):
        n += 1
        name = f"{aside}-{n}"
    if not fs.rename(source, _hadoop_path(spark, name)[0]):
        raise OSError(f"could not move the checkpoint {location} to {name}")
    return name


def _hadoop_path(spark: SparkSession, location: str) -> tuple[JavaObject, JavaObject]:
    jvm = spark._jvm
    assert jvm is not None  # a classic session (not Spark Connect) has its gateway
    path = jvm.org.apache.hadoop.fs.Path(location)  # PySpark has no public handle
    return path, path.getFileSystem(spark._jsc.hadoopConfiguration())


def clear_target(client: redis.Redis, spec: RollupQuerySpec) -> int:
    """Deletes the keys the query wrote for its target since the loss; returns how many."""
    deleted = 0
    for pattern in layout.target_rollup_patterns(spec.target, spec.query_name):
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += cast(int, client.delete(*batch))
                batch = []
        if batch:
            deleted += cast(int, client.delete(*batch))
    return deleted


@dataclass
class Rebuild:
    """One loss of a query's Redis state, rebuilt once. Each step (stop the query and its sink's children,
    clear the target's keys, set the checkpoint aside, record the rebuild) is done once, in order; a step
    that fails is tried again at the next `advance`, after the steps already done. Starting over instead
    would say the loss twice, and once the checkpoint is aside, set the rebuilt query's new one aside too;
    restarting the old query from its checkpoint would roll up only what arrives from now on."""

    spec: RollupQuerySpec
    detected_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    stopped: bool = False
    cleared: bool = False
    kept_as: str | None = None  # where the checkpoint went, once it is aside

    def __post_init__(self) -> None:
        LOG.error("query %s: its state is gone from Redis (flushed, or a new Redis) while its checkpoint %s "
                  "has progress; rebuilding the rollups of %s from what its raw-metrics topics still hold, "
                  "on a new checkpoint (the old one kept as %s); history older than Kafka's retention is "
                  "lost",
                  self.spec.query_name, self.location, self.spec.target, self.aside)

    @property
    def location(self) -> str:
        return checkpoint_location(self.spec)

    @property
    def aside(self) -> str:
        return f"{self.location}.lost-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(self.detected_ms / 1000))}"

    def advance(self, spark: SparkSession, query: StreamingQuery, client: redis.Redis) -> str:
        """Does the steps not done yet; the caller starts the query again once this returns (where the
        checkpoint went). Whatever it raises, the steps done stay done."""
        if not self.stopped:
            sink = sink_of(spark, query)
            if query.isActive:
                query.stop()
            if sink is not None:
                sink.close(BATCH_WAIT_S)
            self.stopped = True
        if not self.cleared:
            cleared = clear_target(client, self.spec)
            LOG.debug("query %s: %d keys written since the loss cleared", self.spec.query_name, cleared)
            self.cleared = True
        if self.kept_as is None:
            self.kept_as = set_checkpoint_aside(spark, self.location, self.aside)
        key = layout.rebuild_key(self.spec.target)
        pipe = client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping={"detected_ts": self.detected_ms, "checkpoint_kept": self.kept_as})
        pipe.pexpire(key, layout.INDEX_TTL_MS)
        pipe.execute()
        return self.kept_as
