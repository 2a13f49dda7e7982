"""Raw metrics records -> 10-second rollups, as pure DataFrame transformations (no I/O).

Each raw record becomes samples `(metric, count, sum, min, max, last)`: a counter or gauge value is one
sample of itself; a latency summary is `count` records with `sum = avg * count`. Samples are kept per
partition and per whole topic (counters also per whole replication), then aggregated in Spark's own
event-time `window()` with a watermark.

Two more kinds of row ride in the same aggregation, so one Kafka read and one stateful operator serve
everything (Spark allows only one streaming aggregation per query in update mode):
- `LATEST_METRIC` rows carry the record itself as JSON (`payload`); the window keeps the newest one per
  subject, from which the sink writes the latest-value hashes;
- `INVALID_RECORDS_METRIC` rows stand for records that do not parse, per raw-metrics topic partition
  and Kafka timestamp window: count = records, min/max/last = their Kafka offsets, payload = an excerpt.

Only the finest window is computed here. Coarser windows (1 min, 1 h) are exact unions of it, so the
Redis sink derives them from the stored 10 s windows (redis_layout.UPSERT_WINDOW_LUA). One Spark
watermark cannot serve several window sizes in one groupBy: its maximum would be set by the hour
windows and would evict the 10 s windows while they are still filling.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from aggregator.redis_layout import (
    ALL_TOPICS,
    FINEST_WINDOW,
    INVALID_RECORDS_METRIC,
    LATEST_METRIC,
    REPLICATION_LEVEL_METRICS,
    WHOLE_TOPIC,
)
from driver.wire.raw_metrics import METRICS, SPARK_SCHEMA_DDL, MetricKind

SAMPLE_TYPE = "struct<metric:string,n:double,sum:double,min:double,max:double,last:double>"
KEY_COLUMNS = ["target", "source", "topic", "upstream_topic", "group", "partition", "metric"]
ROW_COLUMNS = [*KEY_COLUMNS, "ts", "n", "sum", "min", "max", "last", "payload", "payload_ts"]
# Raw metrics topics are `srm-metrics.<source>.internal` (driver.policy.metrics_topic).
SOURCE_OF_TOPIC = r"^srm-metrics\.(.+)\.internal$"
EXCERPT_CHARS = 200


def parse(raw: DataFrame, target: str | None = None) -> DataFrame:
    """Kafka rows -> typed raw-metrics columns; rows that are not valid records get `valid = false`.

    With `target`, a record naming another target cluster is invalid too: it was published to the
    wrong cluster and would otherwise be filed under a target this query does not own.
    """
    parsed = raw.select(
        F.col("topic").alias("kafka_topic"), F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"), F.unix_millis(F.col("timestamp")).alias("kafka_ts"),
        F.col("value").cast("string").alias("raw_value"),
        F.from_json(F.col("value").cast("string"), SPARK_SCHEMA_DDL).alias("m"),
    )
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
        & F.col("m.source").isNotNull() & F.col("m.target").isNotNull() & subject_complete
    )
    if target is not None:
        valid = valid & (F.col("m.target") == F.lit(target))
    return parsed.withColumn("valid", F.coalesce(valid, F.lit(False)))


def _sample(name: str) -> Column:
    spec = METRICS[name]
    source = F.col(f"m.{name}")
    if spec.kind is MetricKind.LATENCY:
        sample = F.struct(
            F.lit(name).alias("metric"), source["count"].cast("double").alias("n"),
            (source["avg"] * source["count"]).alias("sum"), source["min"].alias("min"),
            source["max"].alias("max"), source["last"].alias("last"))
    else:
        value = source.cast("double")
        sample = F.struct(F.lit(name).alias("metric"), F.lit(1.0).alias("n"), value.alias("sum"),
                          value.alias("min"), value.alias("max"), value.alias("last"))
    # Cast by position to one struct type: every element of the samples array must have the same type.
    return F.when(source.isNotNull() & (F.col("m.kind") == spec.subject), sample.cast(SAMPLE_TYPE))


ROW_TYPE = ("struct<topic:string,upstream_topic:string,partition:int,metric:string,n:double,sum:double,"
            "min:double,max:double,last:double,payload:string,payload_ts:bigint>")


def _levels() -> Column:
    """(topic, partition, replication-level?) of each level a record's samples are kept at."""
    level = "struct<topic:string,partition:int,whole:boolean>"
    return F.array(
        F.struct(F.col("m.topic"), F.col("m.partition"), F.lit(False)).cast(level),
        F.struct(F.col("m.topic"), F.lit(WHOLE_TOPIC), F.lit(False)).cast(level),
        F.struct(F.lit(ALL_TOPICS), F.lit(WHOLE_TOPIC), F.lit(True)).cast(level),
    )


def _metric_rows() -> Column:
    """Every (level, metric sample) of a partition or group record."""
    all_samples = F.filter(F.array(*[_sample(name) for name in METRICS]), lambda s: s.isNotNull())

    def at_level(level: Column) -> Column:
        # The replication level only adds up throughput; other metrics do not sum across topics.
        kept = F.filter(all_samples, lambda s: ~level["whole"] | s["metric"].isin(*REPLICATION_LEVEL_METRICS))
        return F.transform(kept, lambda s: F.struct(
            level["topic"], F.when(~level["whole"], F.col("m.upstream_topic")), level["partition"],
            s["metric"], s["n"], s["sum"], s["min"], s["max"], s["last"], F.lit(None).cast("string"),
            F.lit(None).cast("long")).cast(ROW_TYPE))

    return F.flatten(F.transform(_levels(), at_level))


def _latest_row() -> Column:
    replication = F.col("m.kind") == "replication"
    return F.struct(
        F.when(replication, F.lit(ALL_TOPICS)).otherwise(F.col("m.topic")), F.col("m.upstream_topic"),
        F.when(replication, F.lit(WHOLE_TOPIC)).otherwise(F.col("m.partition")), F.lit(LATEST_METRIC),
        *[F.lit(0.0)] * 5, F.to_json(F.col("m")), F.col("m.ts"),
    ).cast(ROW_TYPE)


def _invalid_row() -> Column:
    offset = F.col("kafka_offset").cast("double")
    excerpt = F.substring(F.coalesce(F.col("raw_value"), F.lit("<null value>")), 1, EXCERPT_CHARS)
    return F.struct(
        F.lit(ALL_TOPICS), F.lit(None).cast("string"), F.col("kafka_partition"),
        F.lit(INVALID_RECORDS_METRIC), F.lit(1.0), F.lit(1.0), offset, offset, offset, excerpt,
        F.col("kafka_offset"),
    ).cast(ROW_TYPE)


def samples(parsed: DataFrame, target: str | None = None) -> DataFrame:
    """Every row the window aggregation consumes: metric samples, latest records, invalid records.

    Built as one array per Kafka record and exploded once: a union of three selects would scan the
    Kafka source three times per batch.
    """
    valid = F.col("valid")
    rows = F.when(valid, F.concat(_metric_rows(), F.array(_latest_row()))).otherwise(F.array(_invalid_row()))
    invalid_target = F.lit(target) if target is not None else F.coalesce(F.col("m.target"), F.lit(""))
    return parsed.select(
        F.when(valid, F.col("m.target")).otherwise(invalid_target).alias("target"),
        F.when(valid, F.col("m.source")).otherwise(F.regexp_extract(F.col("kafka_topic"), SOURCE_OF_TOPIC, 1))
        .alias("source"),
        F.when(valid, F.coalesce(F.col("m.group"), F.lit(""))).otherwise(F.lit("")).alias("group"),
        # Unparseable records have no event time of their own: their Kafka timestamp stands in.
        F.when(valid, F.col("m.ts")).otherwise(F.col("kafka_ts")).alias("ts"),
        F.explode(rows).alias("r"),
    ).select(*[F.col(f"r.{c}") if c not in ("target", "source", "group", "ts") else F.col(c)
               for c in ROW_COLUMNS])


def rollups(sampled: DataFrame, watermark_delay: str = "30 seconds") -> DataFrame:
    """count/sum/min/max/last (and newest payload) per series and finest window; `window_start` in ms."""
    finest = f"{FINEST_WINDOW.size_ms // 1000} seconds"
    return (
        sampled.withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", watermark_delay)
        .groupBy(*KEY_COLUMNS, F.window("event_time", finest).alias("w"))
        .agg(F.sum("n").alias("count"), F.sum("sum").alias("sum"), F.min("min").alias("min"),
             # Whole-topic and replication rows share a report's ts across partitions: breaking ties by
             # value keeps `last` independent of how records were split into batches.
             F.max("max").alias("max"), F.max_by("last", F.struct("ts", "last")).alias("last"),
             F.max_by("payload", F.struct("payload_ts", "payload")).alias("payload"))
        .select(*KEY_COLUMNS, F.unix_millis(F.col("w.start")).alias("window_start"),
                "count", "sum", "min", "max", "last", "payload")
    )
