"""Raw metrics records -> partial 10-second rollups of one micro-batch, as pure DataFrame transformations.

Stateless by design: each micro-batch is aggregated on its own (`window_partials`) and the Redis sink
merges the partials into the stored windows of every size. Spark keeps no window state, so a batch costs
one Kafka read, one projection and one hash/sort aggregation; the query's watermark is kept by the sink
next to the last committed batch id (see redis_sink), which makes it as deterministic as the batch id.

Each raw record becomes one wide row per level it is kept at, with five columns per metric
(`<metric>__n/sum/min/max/last`): a counter or gauge value is one sample of itself, a latency summary is
`count` samples with `sum = avg * count`.
- level `p`: the record's own subject (a remote topic-partition, a group's topic-partition, or the
  replication as a whole); carries the record text (`payload`) for the latest values;
- level `t`: the whole remote topic (partition WHOLE_TOPIC) of partition and group records;
- level `r`: the whole replication (topic ALL_TOPICS), counters of partition records only.
Records that do not parse are rows of kind `invalid` (metric INVALID_RECORDS_METRIC per raw-metrics topic
partition, count = records, min/max/last = Kafka offsets, windows by Kafka timestamp, payload = an
excerpt), so bad input is counted and logged, never fatal.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from aggregator.redis_layout import (
    ALL_TOPICS,
    FINEST_WINDOW,
    INVALID_RECORDS_METRIC,
    REPLICATION_LEVEL_METRICS,
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
ALL_METRICS = (*METRICS, INVALID_RECORDS_METRIC)
STATS = ("n", "sum", "min", "max", "last")
KEY_COLUMNS = ["kind", "level", "target", "source", "group", "topic", "partition"]


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


def _metric_stats(name: str, kept: Column) -> list[Column]:
    """n, sum, min, max, last of one metric in one record (all null when absent or not kept)."""
    if name == INVALID_RECORDS_METRIC:
        offset = F.col("kafka_offset").cast("double")
        present = ~F.col("valid")
        stats = [F.lit(1.0), F.lit(1.0), offset, offset, offset]
    else:
        spec, source = METRICS[name], F.col(f"m.{name}")
        present = F.col("valid") & source.isNotNull() & (F.col("m.kind") == spec.subject) & kept
        if spec.kind is MetricKind.LATENCY:
            count = source["count"].cast("double")
            stats = [count, source["avg"] * count, source["min"], source["max"], source["last"]]
        else:
            value = source.cast("double")
            stats = [F.lit(1.0), value, value, value, value]
    return [F.when(present, stat).alias(f"{name}__{s}") for stat, s in zip(stats, STATS, strict=True)]


def _levels() -> Column:
    """(level, topic, partition) of each level a record is kept at."""
    level = "struct<level:string,topic:string,partition:int>"
    kind = F.col("m.kind")
    own_topic = F.when(F.col("valid") & (kind != "replication"), F.col("m.topic")) \
        .otherwise(F.lit(ALL_TOPICS))
    own_partition = (F.when(~F.col("valid"), F.col("kafka_partition"))
                     .when(kind == "replication", F.lit(WHOLE_TOPIC)).otherwise(F.col("m.partition")))
    own = F.struct(F.lit("p"), own_topic, own_partition).cast(level)
    topic = F.struct(F.lit("t"), F.col("m.topic"), F.lit(WHOLE_TOPIC)).cast(level)
    replication = F.struct(F.lit("r"), F.lit(ALL_TOPICS), F.lit(WHOLE_TOPIC)).cast(level)
    return (F.when(~F.col("valid") | (kind == "replication"), F.array(own))
            .when(kind == "group", F.array(own, topic))
            .otherwise(F.array(own, topic, replication)))


def level_rows(parsed: DataFrame, target: str | None = None) -> DataFrame:
    """One wide row per record and level (see the module doc); a stateless projection."""
    valid = F.col("valid")
    invalid_target = F.lit(target) if target is not None else F.coalesce(F.col("m.target"), F.lit(""))
    by_level = parsed.select(
        "*",
        F.when(valid, F.col("m.kind")).otherwise(F.lit(INVALID_KIND)).alias("kind"),
        F.when(valid, F.col("m.target")).otherwise(invalid_target).alias("target"),
        F.when(valid, F.col("m.source")).otherwise(F.regexp_extract(F.col("kafka_topic"), SOURCE_OF_TOPIC, 1))
        .alias("source"),
        F.when(valid, F.coalesce(F.col("m.group"), F.lit(""))).otherwise(F.lit("")).alias("group"),
        # Unparseable records have no event time of their own: their Kafka timestamp stands in.
        F.when(valid, F.col("m.ts")).otherwise(F.col("kafka_ts")).alias("ts"),
        F.explode(_levels()).alias("lv"),
    )
    own, whole = F.col("lv.level") == "p", F.col("lv.level") == "r"
    payload = F.when(own & valid, F.col("raw_value")).when(
        own, F.substring(F.coalesce(F.col("raw_value"), F.lit("<null value>")), 1, EXCERPT_CHARS))
    metrics = []
    for name in ALL_METRICS:
        kept = ~whole | F.lit(name in REPLICATION_LEVEL_METRICS)
        metrics += _metric_stats(name, kept)
    return by_level.select(
        "kind", F.col("lv.level").alias("level"), "target", "source", "group",
        F.col("lv.topic").alias("topic"), F.col("lv.partition").alias("partition"),
        F.when(F.col("lv.level") != "r", F.col("m.upstream_topic")).alias("upstream_topic"),
        "ts", F.col("kafka_offset").alias("offset"), payload.alias("payload"), *metrics,
    )


def window_end(ts: Column) -> Column:
    size = FINEST_WINDOW.size_ms
    return ts - F.pmod(ts, F.lit(size)) + size


def window_partials(rows: DataFrame, watermark_ms: int | None = None) -> DataFrame:
    """Per (subject, 10 s window): count/sum/min/max of every metric, its `last` and the ts of that
    last, the newest payload and the newest event ts.

    Valid records whose window ended at or before `watermark_ms` are late and dropped; invalid records
    are always counted. `last` is the value with the greatest (ts, value): whole-topic rows share a
    report's ts across partitions, so ties break by value and no batch split can change the result.
    """
    if watermark_ms is not None:
        rows = rows.filter((F.col("kind") == INVALID_KIND) | (window_end(F.col("ts")) > F.lit(watermark_ms)))
    aggregates = [F.max("ts").alias("max_ts"), F.max("upstream_topic").alias("upstream_topic"),
                  # Equal ts (invalid records share Kafka's): the greater offset is the later record.
                  F.max(F.when(F.col("payload").isNotNull(), F.struct("ts", "offset", "payload")))["payload"]
                  .alias("payload")]
    for name in ALL_METRICS:
        n, total, low, high, last = (F.col(f"{name}__{s}") for s in STATS)
        aggregates += [F.sum(n).alias(f"{name}__n"), F.sum(total).alias(f"{name}__sum"),
                       F.min(low).alias(f"{name}__min"), F.max(high).alias(f"{name}__max"),
                       _newest(last).alias(f"{name}__last"), _newest(last, "ts").alias(f"{name}__last_ts")]
    start = (F.col("ts") - F.pmod(F.col("ts"), F.lit(FINEST_WINDOW.size_ms))).alias("window_start")
    return rows.groupBy(*KEY_COLUMNS, start).agg(*aggregates)


def _newest(value: Column, part: str = "v") -> Column:
    """`value` (or its ts) of the row with the greatest (ts, value) among those where it is set."""
    return F.max(F.when(value.isNotNull(), F.struct(F.col("ts").alias("ts"), value.alias("v"))))[part]
