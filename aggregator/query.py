"""Wires one target cluster's raw-metrics topics -> rollups -> Redis as one streaming query.

The streaming part only reads the Kafka columns (kafka_columns); each micro-batch is parsed,
aggregated and merged into Redis by the foreachBatch sink, which also keeps the watermark (redis_sink).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from py4j.java_gateway import JavaObject
from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import QueryTerminatedEvent

from aggregator.redis_sink import RedisRollupSink
from contract.replication_policy import metrics_topic_pattern
from contract.settings import DEFAULT_MAX_SUBJECTS

LOG = logging.getLogger(__name__)

RECONNECT_BACKOFF_MAX_MS = 30_000
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
# Spark writes a batch's offset log and commit log files through Hadoop's FileContext, which on a local
# disk runs `chmod` and `readlink` as child processes of the JVM for each file (Hadoop's native library,
# which would do them in-process, is not in the Maven jars): two forks a file, two files a batch. On a
# local disk the FileSystem API's rename is rename(2), as atomic as FileContext's, and it spawns nothing.
LOCAL_CHECKPOINT_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")

# Spark's Kafka source reads a partition by polling its consumer, `max.poll.records` records at most
# (Kafka's default: 500), and after every poll it asks the broker for the partition's earliest and latest
# offsets (two ListOffsets round trips: its check for lost data), so a task's Kafka read costs per poll:
# fewer, larger polls (fetches of up to 8 MiB a partition; the default 1 MiB holds ~15k of these records)
# read a batch in a fraction of the time. 5k records a poll did as well as 20k in bench/aggregator.py
# with a quarter of the records alive in a task (bench/RESULTS.md, "CONSUMER_FETCH").
# A consumer fetches ahead: after a poll it asks for the records past the task's range, at the end of the
# log, and the broker holds that request up to fetch.max.wait.ms (Kafka's default: 500 ms) for new data.
# A consumer has one fetch in flight a broker, so the next batch's task on that cached consumer waited
# for the held request first: until the next records came, up to fetch.max.wait.ms when the input
# paused. A task's range is always on the broker already, so a short wait costs it nothing;
# an idle consumer sends no fetches at all.
CONSUMER_FETCH = {"max.poll.records": "5000", "max.partition.fetch.bytes": str(8 << 20),
                  "fetch.max.wait.ms": "10"}


@dataclass(frozen=True)
class RollupQuerySpec:
    target: str
    bootstrap_servers: str
    redis_url: str
    checkpoint_dir: str
    # Java client properties (security) of the target cluster; may hold credentials, so not in repr.
    kafka_options: dict[str, str] = field(default_factory=dict, repr=False)
    trigger_interval: str = "2 seconds"
    watermark_delay_ms: int = 30_000  # kept by the sink (redis_sink), not by Spark
    max_offsets_per_trigger: int | None = None
    max_subjects_per_replication: int = DEFAULT_MAX_SUBJECTS  # aggregator.subject_cap
    # Java regex of the raw-metrics topics to read; None: every `srm-metrics.<source>.internal`.
    topics_pattern: str | None = None

    @property
    def query_name(self) -> str:
        return f"rollup_{self.target}"


def start_rollup_query(spark: SparkSession, spec: RollupQuerySpec) -> StreamingQuery:
    rows = kafka_columns(spark.readStream.format("kafka").options(**kafka_source_options(spec)).load())
    _choose_checkpoint_manager(spark, spec.checkpoint_dir)
    sink = RedisRollupSink(spec.redis_url, spec.query_name, spec.watermark_delay_ms, spec.target,
                           merge_in_background=True, max_subjects=spec.max_subjects_per_replication)
    # Each target cluster gets its own FAIR pool so a busy cluster cannot starve the others.
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", spec.target)
    try:
        query = (
            rows.writeStream.queryName(spec.query_name)
            .outputMode("append")
            .option("checkpointLocation", f"{spec.checkpoint_dir}/{spec.target}")
            .trigger(processingTime=spec.trigger_interval)
            .foreachBatch(sink)
            .start()
        )
    finally:
        # None unsets it (the stubs say str)
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    # The query id is kept in the checkpoint: the sink state is scoped by it (see RedisRollupSink).
    sink.bind(str(query.id))
    # By run: a query restarted from its checkpoint keeps its id, and the listener may hear of the old
    # run's end after the new run started; the old sink must close then, not the new one.
    _sinks_of(spark)[str(query.runId)] = sink
    LOG.info("rollup query for target %s started (checkpoint %s/%s)", spec.target, spec.checkpoint_dir,
             spec.target)
    return query


def kafka_source_options(spec: RollupQuerySpec) -> dict[str, str]:
    """The Kafka source's options for one target cluster; its client properties win over ours."""
    options = {
        "kafka.bootstrap.servers": spec.bootstrap_servers,
        "subscribePattern": spec.topics_pattern or metrics_topic_pattern(),
        # Only consulted for a new checkpoint: metrics written before the first start are not lost.
        "startingOffsets": "earliest",
        # Raw metrics topics are short-lived monitoring data; retention must not kill the query.
        "failOnDataLoss": "false",
        "groupIdPrefix": f"srm-aggregator-{spec.target}",
        # The Java client warns once per reconnect; its default 1 s cap makes that 60 lines a minute
        # while a cluster is down. Backing off to 30 s keeps the news and drops the flood.
        "kafka.reconnect.backoff.max.ms": str(RECONNECT_BACKOFF_MAX_MS),
        **{f"kafka.{key}": value for key, value in CONSUMER_FETCH.items()},
        **{f"kafka.{key}": value for key, value in spec.kafka_options.items()},
    }
    if spec.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(spec.max_offsets_per_trigger)
    return options


def checkpoint_file_manager(checkpoint_dir: str, default_fs: str) -> str | None:
    """The checkpoint file manager for checkpoints under `checkpoint_dir` (on Hadoop's `default_fs` when it
    names no scheme): the FileSystem API's on a local disk, Spark's own choice (None) elsewhere: on other
    file systems FileContext's rename may be the only atomic one."""
    scheme = urlparse(checkpoint_dir).scheme or urlparse(default_fs).scheme
    return LOCAL_CHECKPOINT_MANAGER if scheme in ("", "file") else None


def _choose_checkpoint_manager(spark: SparkSession, checkpoint_dir: str) -> None:
    """Sets the session's checkpoint file manager for local checkpoints, unless one is configured."""
    if spark.conf.get(CHECKPOINT_MANAGER_CONF, None):
        return
    default_fs = spark.sparkContext._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///"
    manager = checkpoint_file_manager(checkpoint_dir, default_fs)
    if manager is not None:
        spark.conf.set(CHECKPOINT_MANAGER_CONF, manager)


def kafka_columns(kafka: DataFrame) -> DataFrame:
    """The Kafka rows as raw_records.flat_table takes them: a plan re-planned in no time each batch."""
    return kafka.select("topic", "partition", "offset", F.unix_millis("timestamp").alias("kafka_ts"), "value")


class _SinkCloser(StreamingQueryListener):
    """Lets a sink drop what it keeps when its query ends (stopped, or failed and restarted by the
    supervisor as a new query with a new sink)."""

    def __init__(self) -> None:
        self.sinks: dict[str, RedisRollupSink] = {}

    @property
    def _jlistener(self) -> JavaObject:
        # What addListener registers in the JVM: its events reach _TerminationsOnly, not PySpark's own
        # adapter (see there).
        if not hasattr(self, "_termination_listener"):
            wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper  # type: ignore[union-attr]
            self._termination_listener = wrapper(_TerminationsOnly(self))
        return self._termination_listener

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        pass

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        sink = self.sinks.pop(str(event.runId), None)
        if sink is not None:
            sink.close()


class _TerminationsOnly:
    """The Python side (py4j) of _SinkCloser's JVM listener, which turns only a query's end into Python.

    PySpark's own adapter turns every event into Python objects, a progress report of each micro-batch
    through ~50 calls into the JVM: in the live part of bench/aggregator.py ~18 ms of the driver's CPU a
    batch, and 130-210 ms of a callback thread taking the GIL from the next batch's sink, ~50 times."""

    def __init__(self, closer: _SinkCloser) -> None:
        self.closer = closer

    def onQueryStarted(self, jevent: JavaObject) -> None:
        pass

    def onQueryProgress(self, jevent: JavaObject) -> None:
        pass

    def onQueryIdle(self, jevent: JavaObject) -> None:
        pass

    def onQueryTerminated(self, jevent: JavaObject) -> None:
        self.closer.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


_CLOSERS: dict[int, _SinkCloser] = {}


def _sinks_of(spark: SparkSession) -> dict[str, RedisRollupSink]:
    closer = _CLOSERS.get(id(spark))
    if closer is None:
        closer = _CLOSERS[id(spark)] = _SinkCloser()
        spark.streams.addListener(closer)
    return closer.sinks


def close_sinks(spark: SparkSession, wait_s: float = 0.0) -> None:
    """Once the queries are stopped, lets every sink finish a batch its query's stop gave up on (up to
    `wait_s` in all: Redis is left at a batch boundary) and drop what it keeps, not waiting for the
    listener's event."""
    deadline = time.monotonic() + wait_s
    sinks = _sinks_of(spark)
    for key in list(sinks):
        sinks.pop(key).close(max(0.0, deadline - time.monotonic()))


def sink_of(spark: SparkSession, query: StreamingQuery) -> RedisRollupSink | None:
    """The sink of a running query (the supervisor reads whether it found its state lost; a rebuild closes
    it, waiting for its batch and merges)."""
    return _sinks_of(spark).get(str(query.runId))
