"""Raw metrics records -> flat typed rows, as pure DataFrame transformations (the streaming part).

Stateless by design: the query only parses and projects; each micro-batch is aggregated on its own
(window_partials, on Arrow) and the Redis sink merges the partial windows into the stored windows of
every size. Spark keeps no window state, so a batch costs one Kafka read and one projection; the
query's watermark is kept by the sink next to the last committed batch id (see redis_sink), which makes
it as deterministic as the batch id.

Records that do not parse become rows of kind `invalid` (with their Kafka partition, offset and an
excerpt), so bad input is counted and logged, never fatal.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from aggregator.redis_layout import (
    ALL_TOPICS,
    FINEST_WINDOW,
    WHOLE_TOPIC,
)
from driver.wire.raw_metrics import METRICS, SPARK_SCHEMA_DDL, MetricKind

# Raw metrics topics are `srm-metrics.<source>.internal` (driver.policy.metrics_topic).
SOURCE_OF_TOPIC = r"^srm-metrics\.(.+)\.internal$"
EXCERPT_CHARS = 200
# A record stamped further than this after its Kafka timestamp is counted as invalid: its event time
# would push the watermark ahead and every on-time record after it would be dropped as late. Kafka's
# timestamp (not the clock) keeps the decision the same when a batch is replayed.
MAX_FUTURE_SKEW_MS = 10 * 60_000
INVALID_KIND = "invalid"
LATENCY_PARTS = ("count", "avg", "min", "max", "last")
# Fields of a replication report kept for its latest value (besides ts and period_ms).
REPLICATION_FIELDS = ("status", "error", "workers", "tasks", "last_heartbeat_ts", "topics_replicated",
                      "enabled")


def parse(raw: DataFrame, target: str | None = None) -> DataFrame:
    """Kafka rows -> typed raw-metrics columns; rows that are not valid records get `valid = false`.

    With `target`, a record naming another target cluster is invalid too: it was published to the
    wrong cluster and would otherwise be filed under a target this query does not own.
    """
    parsed = raw.select(
        F.col("topic").alias("kafka_topic"), F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"), F.unix_millis(F.col("timestamp")).alias("kafka_ts"),
        F.col("value").cast("string").alias("raw_value"),
    ).withColumn("m", F.from_json(F.col("raw_value"), SPARK_SCHEMA_DDL))
    kind = F.col("m.kind")
    subject_complete = (
        F.when(kind == "replication", F.col("m.status").isNotNull())
        .when(kind == "partition", F.col("m.topic").isNotNull() & F.col("m.partition").isNotNull()
              & (F.col("m.partition") >= 0))
        .when(kind == "group", F.col("m.group").isNotNull() & F.col("m.topic").isNotNull()
              & F.col("m.partition").isNotNull() & (F.col("m.partition") >= 0))
        .otherwise(F.lit(False))
    )
    valid = (
        F.col("m").isNotNull() & (F.col("m.v") == 1) & F.col("m.ts").isNotNull()
        & (F.col("m.ts") <= F.col("kafka_ts") + MAX_FUTURE_SKEW_MS)
        & F.col("m.source").isNotNull() & F.col("m.target").isNotNull() & subject_complete
    )
    if target is not None:
        valid = valid & (F.col("m.target") == F.lit(target))
    return parsed.withColumn("valid", F.coalesce(valid, F.lit(False)))


def flat_rows(parsed: DataFrame, target: str | None = None) -> DataFrame:
    """One row per Kafka record: its subject, event ts and the value columns of its kind (null
    otherwise); invalid records as kind INVALID_KIND with their Kafka partition, offset and an excerpt.

    A stateless projection: the aggregation happens per micro-batch in window_partials.
    """
    valid, kind = F.col("valid"), F.col("m.kind")
    invalid_target = F.lit(target) if target is not None else F.coalesce(F.col("m.target"), F.lit(""))
    subject = [
        F.when(valid, kind).otherwise(F.lit(INVALID_KIND)).alias("kind"),
        F.when(valid, F.col("m.target")).otherwise(invalid_target).alias("target"),
        F.when(valid, F.col("m.source")).otherwise(F.regexp_extract(F.col("kafka_topic"), SOURCE_OF_TOPIC, 1))
        .alias("source"),
        F.when(valid, F.coalesce(F.col("m.group"), F.lit(""))).otherwise(F.lit("")).alias("group"),
        F.when(valid & (kind != "replication"), F.col("m.topic")).otherwise(F.lit(ALL_TOPICS)).alias("topic"),
        F.when(valid & (kind != "replication"), F.col("m.upstream_topic")).alias("upstream_topic"),
        F.when(~valid, F.col("kafka_partition")).when(kind == "replication", F.lit(WHOLE_TOPIC))
        .otherwise(F.col("m.partition")).alias("partition"),
        # Unparseable records have no event time of their own: their Kafka timestamp stands in.
        F.when(valid, F.col("m.ts")).otherwise(F.col("kafka_ts")).alias("ts"),
        F.col("kafka_offset").alias("offset"),
        F.when(~valid, F.substring(F.coalesce(F.col("raw_value"), F.lit("<null value>")), 1, EXCERPT_CHARS))
        .alias("excerpt"),
        F.when(valid, F.col("m.period_ms")).alias("period_ms"),
    ]
    values = []
    for name, spec in METRICS.items():
        present = valid & (kind == spec.subject)
        if spec.kind is MetricKind.LATENCY:
            values += [F.when(present, F.col(f"m.{name}.{part}")).alias(f"{name}__{part}")
                       for part in LATENCY_PARTS]
        else:
            values.append(F.when(present, F.col(f"m.{name}")).alias(name))
    replication = [F.when(valid & (kind == "replication"), F.col(f"m.{name}")).alias(name)
                   for name in REPLICATION_FIELDS]
    return parsed.select(*subject, *values, *replication)


def window_end(ts: Column) -> Column:
    size = FINEST_WINDOW.size_ms
    return ts - F.pmod(ts, F.lit(size)) + size


def on_time(rows: DataFrame, watermark_ms: int | None) -> DataFrame:
    """Drops valid records whose 10 s window ended at or before the watermark; invalid records are
    always counted."""
    if watermark_ms is None:
        return rows
    return rows.filter((F.col("kind") == INVALID_KIND) | (window_end(F.col("ts")) > F.lit(watermark_ms)))
