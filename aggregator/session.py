"""Builds the one SparkSession of a process: the Kafka source's jars, small and quiet."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from aggregator import kafka_connector


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
        .config("spark.driver.memory", "1g")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "false")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
