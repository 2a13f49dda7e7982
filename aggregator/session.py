"""Builds the one SparkSession of a process: the Kafka source's jars, small and quiet."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from aggregator import kafka_connector

# The Spark JVM's heap (local mode: driver and executors in one JVM). Its live set is small whatever the
# series: the Kafka records of a task stream through it to the Python workers as Arrow batches, and a
# task's answer comes back LZ4-compressed (~3 MB at 100,000 series). Capped at 1 GB, G1 grew the heap to
# ~450 MB committed (live ~130-190 MB after a young collection) and kept ~56 MB of its own structures
# beside it (NMT). 512 MB is about the least Spark takes (it refuses a heap under 450 MB), and the serial
# collector's structures are a card table: at 100,000 series the JVM's peak fell ~100 MB (870 -> 768 MB) for
# ~0.07 CPU s a batch more, the drain rate the same (bench/RESULTS.md, s29).
# The collector goes in defaultJavaOptions, the key Spark keeps for defaults: a user's extraJavaOptions
# (a JAAS file, a debugger) are added after it, and nothing of theirs is replaced.
DRIVER_MEMORY = "512m"
DRIVER_JAVA_OPTIONS = "-XX:+UseSerialGC"


def launched_by_spark_submit() -> bool:
    # spark-submit starts the JVM first and hands the Python driver its gateway through these.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = "local[2]", app_name: str = "srm-aggregator",
                  extra: dict[str, str] | None = None) -> SparkSession:
    """`master=None` keeps the master spark-submit was given."""
    # Spark's launcher reads these from the environment; set before the JVM starts.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    builder = (
        # Local paths (Spark's Ivy fetched them once): no resolution at start-up, works with no network.
        builder.config("spark.jars", ",".join(kafka_connector.jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.driver.defaultJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "false")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
