"""Raw metrics records -> 10-second rollups, as pure DataFrame transformations (no I/O).

Each raw record becomes samples `(metric, count, sum, min, max, last)`: a counter or gauge value is one
sample of itself; a latency summary is `count` records with `sum = avg * count`. Samples are kept per
partition and per whole topic, then aggregated in Spark's own event-time `window()` with a watermark.

Only the finest window is computed here. Coarser windows (1 min, 1 h) are exact unions of it, so the
Redis sink derives them from the stored 10 s windows (redis_layout.UPSERT_WINDOW_LUA). One Spark
watermark cannot serve several window sizes in one groupBy: its maximum would be set by the hour
windows and would evict the 10 s windows while they are still filling.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from aggregator.redis_layout import FINEST_WINDOW, WHOLE_TOPIC
from driver.wire.raw_metrics import METRICS, SPARK_SCHEMA_DDL, MetricKind

SAMPLE_TYPE = "struct<metric:string,n:double,sum:double,min:double,max:double,last:double>"
KEY_COLUMNS = ["target", "source", "topic", "upstream_topic", "group", "partition", "metric"]


def parse(raw: DataFrame) -> DataFrame:
    """Kafka rows -> typed raw-metrics columns; rows that are not valid records get `valid = false`."""
    parsed = raw.select(
        F.col("topic").alias("kafka_topic"), F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.from_json(F.col("value").cast("string"), SPARK_SCHEMA_DDL).alias("m"),
    )
    valid = (
        F.col("m").isNotNull() & (F.col("m.v") == 1)
        & F.col("m.kind").isin("partition", "group", "replication")
        & F.col("m.ts").isNotNull() & F.col("m.source").isNotNull() & F.col("m.target").isNotNull()
    )
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


def samples(parsed: DataFrame) -> DataFrame:
    """One row per (record, metric, level): partition level and whole-topic level."""
    all_samples = F.filter(F.array(*[_sample(name) for name in METRICS]), lambda s: s.isNotNull())
    return (
        parsed.where(F.col("valid") & F.col("m.kind").isin("partition", "group"))
        .select(
            F.col("m.target").alias("target"), F.col("m.source").alias("source"),
            F.col("m.topic").alias("topic"), F.col("m.upstream_topic").alias("upstream_topic"),
            F.coalesce(F.col("m.group"), F.lit("")).alias("group"),
            F.explode(F.array(F.col("m.partition"), F.lit(WHOLE_TOPIC))).alias("partition"),
            F.col("m.ts").alias("ts"), F.explode(all_samples).alias("s"),
        )
        .select("target", "source", "topic", "upstream_topic", "group", "partition", "ts", "s.*")
    )


def rollups(sampled: DataFrame, watermark_delay: str = "30 seconds") -> DataFrame:
    """count/sum/min/max/last per series and finest window; `window_start` is epoch ms."""
    finest = f"{FINEST_WINDOW.size_ms // 1000} seconds"
    return (
        sampled.withColumn("event_time", F.timestamp_millis(F.col("ts")))
        .withWatermark("event_time", watermark_delay)
        .groupBy(*KEY_COLUMNS, F.window("event_time", finest).alias("w"))
        .agg(F.sum("n").alias("count"), F.sum("sum").alias("sum"), F.min("min").alias("min"),
             F.max("max").alias("max"), F.max_by("last", "ts").alias("last"))
        .select(*KEY_COLUMNS, F.unix_millis(F.col("w.start")).alias("window_start"),
                "count", "sum", "min", "max", "last")
    )
