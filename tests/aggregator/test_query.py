"""Pure choices the rollup query makes before Spark starts it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from aggregator.query import (
    CONSUMER_FETCH,
    LOCAL_CHECKPOINT_MANAGER,
    RollupQuerySpec,
    checkpoint_file_manager,
    kafka_source_options,
)
from contract.replication_policy import metrics_topic_pattern


@pytest.mark.parametrize(("checkpoint_dir", "default_fs"), [
    ("/var/lib/srm/checkpoints", "file:///"),
    ("file:/var/lib/srm/checkpoints", "hdfs://namenode:8020"),
    ("file:///var/lib/srm/checkpoints", "file:///"),
    ("relative/checkpoints", "file:///"),
])
def test_local_checkpoints_use_the_file_system_api(checkpoint_dir, default_fs):
    assert checkpoint_file_manager(checkpoint_dir, default_fs) == LOCAL_CHECKPOINT_MANAGER


@pytest.mark.parametrize(("checkpoint_dir", "default_fs"), [
    ("hdfs://namenode:8020/srm/checkpoints", "file:///"),
    ("/srm/checkpoints", "hdfs://namenode:8020"),
    ("s3a://bucket/srm/checkpoints", "file:///"),
])
def test_other_file_systems_keep_sparks_choice(checkpoint_dir, default_fs):
    assert checkpoint_file_manager(checkpoint_dir, default_fs) is None


SPEC = RollupQuerySpec(target="east", bootstrap_servers="east-1:9092", redis_url="redis://localhost:6379/0",
                       checkpoint_dir="/var/lib/srm/checkpoints")


def test_the_source_reads_a_partition_in_large_polls():
    # Kafka's default of 500 records a poll made a 200k-record batch 202 polls a task, each with two
    # ListOffsets round trips (the connector's data-loss check).
    options = kafka_source_options(SPEC)
    assert options["kafka.max.poll.records"] == "5000"
    assert options["kafka.max.partition.fetch.bytes"] == str(8 * 1024 * 1024)


def test_a_task_does_not_wait_for_the_fetch_its_consumer_held_at_the_end_of_the_log():
    # Kafka's 500 ms default delayed a batch's read by the prefetch parked at the log end.
    assert kafka_source_options(SPEC)["kafka.fetch.max.wait.ms"] == "10"
    spec = replace(SPEC, kafka_options={"fetch.max.wait.ms": "100"})
    assert kafka_source_options(spec)["kafka.fetch.max.wait.ms"] == "100"


@pytest.mark.parametrize("max_offsets", [None, 200_000])
def test_the_sources_other_options_are_unchanged(max_offsets):
    # Everything the reader carried before the fetch sizing came in.
    spec = replace(SPEC, kafka_options={"security.protocol": "SSL"}, max_offsets_per_trigger=max_offsets)
    expected = {
        "kafka.bootstrap.servers": "east-1:9092", "subscribePattern": metrics_topic_pattern(),
        "startingOffsets": "earliest", "failOnDataLoss": "false", "groupIdPrefix": "srm-aggregator-east",
        "kafka.reconnect.backoff.max.ms": "30000", "kafka.security.protocol": "SSL",
        **({"maxOffsetsPerTrigger": "200000"} if max_offsets else {}),
    }
    options = kafka_source_options(spec)
    assert {k: v for k, v in options.items() if k[len("kafka."):] not in CONSUMER_FETCH} == expected
    assert kafka_source_options(replace(spec, topics_pattern=r"srm-metrics\.a\.internal"))[
        "subscribePattern"] == r"srm-metrics\.a\.internal"


def test_the_clusters_client_properties_win_over_the_fetch_sizing():
    spec = replace(SPEC, kafka_options={"max.poll.records": "500", "max.partition.fetch.bytes": "1048576"})
    options = kafka_source_options(spec)
    assert options["kafka.max.poll.records"] == "500"
    assert options["kafka.max.partition.fetch.bytes"] == "1048576"
