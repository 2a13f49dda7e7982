"""Builds the one SparkSession of a process: local jars for the Kafka source, small and quiet."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from stack.jars import spark_jar_list


def build_session(master: str = "local[2]", app_name: str = "srm-aggregator",
                  extra: dict[str, str] | None = None) -> SparkSession:
    # Spark's launcher reads these from the environment; set before the JVM starts.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        # Local paths: no Ivy resolution at start-up, works with no network.
        .config("spark.jars", ",".join(spark_jar_list()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.kafka.useDeprecatedOffsetFetching", "false")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
