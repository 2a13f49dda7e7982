"""The replication data path against real brokers: topology, topic sync, progress and offset syncs.

Each test uses its own uuid-named topics and a `topics` filter limited to them, so the shared
session clusters (and the other tests' topics on them) never leak into a replication under test.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType

from contract.config import SrmConfig, load_config
from contract.records import raw_metrics
from contract.records.mm2 import OffsetSync, WireFormatError
from contract.replication_policy import progress_topic
from driver.control_lists import AllowDenyLists
from driver.progress_record import PROGRESS_TOPIC_PARTITIONS
from driver.replication import ReplicationWorker
from driver.target_writer import AtLeastOnceWriter
from stack import srm_properties
from tests.driver.replication_cluster_ops import (
    admin,
    create_topic,
    eventually,
    murmur2_partition,
    produce,
    read_topic,
    remote_values,
    topic_config,
)

pytestmark = pytest.mark.integration

FAST = {"refresh.topics.interval.seconds": 1, "sync.topic.configs.interval.seconds": 1, "metrics.period": 1}


@pytest.fixture
def north(north_cluster: str) -> str:
    """A third cluster, for the fan-in topology (the session's)."""
    return north_cluster


def write_config(tmp_path: Path, bootstraps: dict[str, str], pairs: list[tuple[str, str]],
                 extra: dict[str, object]) -> SrmConfig:
    path = srm_properties.write(tmp_path / "srm.properties", bootstraps, pairs, "redis://127.0.0.1:1/0",
                                {**FAST, **extra})
    return load_config(str(path))


@contextmanager
def running(config: SrmConfig,
            control: AllowDenyLists | None = None) -> Iterator[dict[str, ReplicationWorker]]:
    stopping = threading.Event()
    workers = {r.name: ReplicationWorker(config, r, stopping, control=control)
               for r in config.replications() if r.enabled}
    for worker in workers.values():
        worker.start()
    try:
        yield workers
    finally:
        stopping.set()
        for worker in workers.values():
            worker.join(60)


def test_bidirectional_replication_does_not_loop(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    prefix = f"bidi-{uuid.uuid4().hex[:8]}"
    east_topic, west_topic = f"{prefix}-e", f"{prefix}-w"
    create_topic(kafka_clusters["east"], east_topic, 2)
    create_topic(kafka_clusters["west"], west_topic, 2)
    east_values = produce(kafka_clusters["east"], east_topic, 40)
    west_values = produce(kafka_clusters["west"], west_topic, 40)
    config = write_config(tmp_path, kafka_clusters, [("east", "west"), ("west", "east")],
                          {"topics": f"{prefix}.*|east\\.{prefix}.*|west\\.{prefix}.*"})
    with running(config) as workers:
        assert remote_values(kafka_clusters["west"], f"east.{east_topic}", 40) == sorted(east_values)
        assert remote_values(kafka_clusters["east"], f"west.{west_topic}", 40) == sorted(west_values)
        # Once the remote topics exist, each side must still see only the other's local topic.
        seen = {name: worker.refreshes for name, worker in workers.items()}
        eventually(lambda: all(w.refreshes > seen[n] + 1 for n, w in workers.items()), "two more refreshes")
        # Heartbeats topics are always replicated (MM2); other tests may have created them here.
        assert set(workers["east->west"].topics) - {"heartbeats"} == {east_topic}
        assert set(workers["west->east"].topics) - {"heartbeats"} == {west_topic}
    east_topics = admin(kafka_clusters["east"]).list_topics(timeout=10).topics
    west_topics = admin(kafka_clusters["west"]).list_topics(timeout=10).topics
    assert f"east.west.{west_topic}" not in east_topics and f"west.east.{east_topic}" not in west_topics


def test_two_sources_fan_into_one_target(kafka_clusters: dict[str, str], north: str, tmp_path: Path) -> None:
    topic = f"fanin-{uuid.uuid4().hex[:8]}"
    bootstraps = {**kafka_clusters, "north": north}
    create_topic(kafka_clusters["east"], topic, 2)
    create_topic(north, topic, 3)
    east_values = produce(kafka_clusters["east"], topic, 30, tag="east")
    north_values = produce(north, topic, 30, tag="north")
    config = write_config(tmp_path, bootstraps, [("east", "west"), ("north", "west")], {"topics": topic})
    with running(config):
        assert remote_values(kafka_clusters["west"], f"east.{topic}", 30) == sorted(east_values)
        assert remote_values(kafka_clusters["west"], f"north.{topic}", 30) == sorted(north_values)
    partitions = admin(kafka_clusters["west"]).list_topics(timeout=10).topics[f"north.{topic}"].partitions
    assert len(partitions) == 3


def test_topic_sync_progress_offset_syncs_and_metrics(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    prefix = f"sync-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path, kafka_clusters, [("east", "west")], {"topics": f"{prefix}.*"})
    with running(config) as workers:
        worker = workers["east->west"]
        eventually(lambda: worker.refreshes > 0, "the first refresh")
        topic = f"{prefix}-late"  # created after the driver started
        create_topic(east, topic, 2, {"retention.ms": "123456789"})
        values = produce(east, topic, 20)
        assert remote_values(west, f"east.{topic}", 20) == sorted(values)
        assert topic_config(west, f"east.{topic}", "retention.ms") == "123456789"

        east_admin = admin(east)
        east_admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        grown = produce(east, topic, 8, partitions=[2, 3], tag="grown")
        eventually(lambda: len(admin(west).list_topics(f"east.{topic}", timeout=10)
                               .topics[f"east.{topic}"].partitions) == 4, "the remote topic to grow")
        remote = read_topic(west, f"east.{topic}", 28)
        assert {(r.partition, r.value) for r in remote if r.value in grown} == {
            (2 + i % 2, v) for i, v in enumerate(grown)}
        set_retention(east, topic, "987654321")
        eventually(lambda: topic_config(west, f"east.{topic}", "retention.ms") == "987654321",
                   "the config change to reach the remote topic")

        last = {p: max(r.offset for r in read_topic(east, topic, 28) if r.partition == p) for p in range(4)}
        eventually(lambda: progress_offsets(west, "east", topic) == last, "progress of every partition")
        eventually(lambda: latest_syncs(east, topic) == {p: (o, o) for p, o in last.items()},
                   "offset syncs of every partition's last record")
        report = eventually(lambda: replication_report(west, "east"), "a RUNNING replication report")
        assert report.workers >= 1 and report.tasks >= 1 and report.topics_replicated == 1


def test_at_least_once_copies_through_several_producers_each_partition_in_order(
        kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    """Two partitions per producer on the one west broker: 8 partitions go through 4 producers, every
    record arrives in its partition's order, and progress names each partition's last record."""
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"spread-{uuid.uuid4().hex[:8]}"
    create_topic(east, topic, 8)
    config = write_config(tmp_path, kafka_clusters, [("east", "west")], {
        "topics": topic, "replication.producer.partitions.per.broker": 2, "replication.producers.max": 4})
    with running(config) as workers:
        worker = workers["east->west"]
        produce(east, topic, 400)
        produce(east, topic, 400, tag="more")
        source, remote = read_topic(east, topic, 800), read_topic(west, f"east.{topic}", 800)
        assert {p: [r.value for r in remote if r.partition == p] for p in range(8)} == {
            p: [r.value for r in source if r.partition == p] for p in range(8)}
        writer = worker.writer
        assert isinstance(writer, AtLeastOnceWriter) and len(writer.copying.producers) == 4
        assert sorted(flow.lane for flow in writer.flows.values()) == [0, 0, 1, 1, 2, 2, 3, 3]
        last = {p: max(r.offset for r in source if r.partition == p) for p in range(8)}
        eventually(lambda: progress_offsets(west, "east", topic) == last, "progress of every partition")


def set_retention(bootstrap: str, topic: str, value: str) -> None:
    alter = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
    client = admin(bootstrap)
    client.incremental_alter_configs([alter])[alter].result(30)


def test_configs_keep_their_own_interval_when_new_topics_are_not_looked_for(
        kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    # refresh.topics.enabled = false: the topics found at start are replicated, no later one; their
    # configs still follow every sync.topic.configs.interval.seconds.
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    prefix = f"frozen-{uuid.uuid4().hex[:8]}"
    early, late = f"{prefix}-early", f"{prefix}-late"
    create_topic(east, early, 1)
    config = write_config(tmp_path, kafka_clusters, [("east", "west")], {
        "topics": f"{prefix}.*", "refresh.topics.enabled": "false", "refresh.topics.interval.seconds": 600,
        "sync.topic.configs.interval.seconds": 1})
    with running(config) as workers:
        eventually(lambda: workers["east->west"].refreshes > 0, "the first refresh")
        create_topic(east, late, 1)
        produce(east, late, 5)
        set_retention(east, early, "86400001")
        eventually(lambda: topic_config(west, f"east.{early}", "retention.ms") == "86400001",
                   "the config change to reach the remote topic")
        values = produce(east, early, 10)
        assert remote_values(west, f"east.{early}", 10) == sorted(values)
        # Refreshes ran after the late topic existed (they carried the config change), and left it out.
        assert f"east.{late}" not in admin(west).list_topics(timeout=10).topics


def progress_offsets(bootstrap: str, source: str, topic: str) -> dict[int, int]:
    """Last progress per partition of `topic`, checking MM2's exact key bytes and murmur2 placement."""
    found: dict[int, int] = {}
    for record in read_topic(bootstrap, progress_topic(source), None):
        assert record.key is not None and record.value is not None  # MM2's progress records have both
        key = json.loads(record.key)
        if key[0] != "MirrorSourceConnector" or key[1].get("topic") != topic:
            continue
        partition = key[1]["partition"]
        expected_key = (f'["MirrorSourceConnector",{{"cluster":"{source}","partition":{partition},'
                        f'"topic":"{topic}"}}]').encode()
        assert record.key == expected_key
        assert record.partition == murmur2_partition(record.key, PROGRESS_TOPIC_PARTITIONS)
        offset = json.loads(record.value)
        assert list(offset) == ["offset"]
        found[partition] = offset["offset"]
    return found


def latest_syncs(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    syncs: dict[int, tuple[int, int]] = {}
    for record in read_topic(bootstrap, "mm2-offset-syncs.west.internal", None):
        assert record.partition == 0
        try:
            sync = OffsetSync.decode(record.key, record.value)
        except WireFormatError:  # other tests on these shared clusters write garbage on purpose
            continue
        if sync.topic == topic:
            syncs[sync.partition] = (sync.upstream_offset, sync.downstream_offset)
    return syncs


def replication_report(bootstrap: str, source: str) -> raw_metrics.ReplicationMetrics | None:
    records = read_topic(bootstrap, f"srm-metrics.{source}.internal", None)
    reports = [raw_metrics.decode(r.value) for r in records if r.value is not None]
    running_reports = [r for r in reports
                       if isinstance(r, raw_metrics.ReplicationMetrics) and r.status == "RUNNING"
                       and r.topics_replicated > 0]
    return running_reports[-1] if running_reports else None


class MutableControlLists:
    """The srm-control interface with lists set directly by the test."""

    def __init__(self) -> None:
        self.allow: frozenset[str] = frozenset()
        self.deny: frozenset[str] = frozenset()
        self._version = 1

    def update(self, allow: frozenset[str], deny: frozenset[str]) -> None:
        self.allow, self.deny = allow, deny
        self._version += 1

    def topic_lists(self, source: str, target: str) -> tuple[frozenset[str], frozenset[str]]:
        return self.allow, self.deny

    def group_lists(self, source: str, target: str) -> tuple[frozenset[str], frozenset[str]]:
        return frozenset(), frozenset()

    def version(self) -> int:
        return self._version


def test_control_list_change_applies_without_restart(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    prefix = f"ctl-{uuid.uuid4().hex[:8]}"
    kept, held_back = f"{prefix}-kept", f"{prefix}-held"
    create_topic(east, kept, 1)
    create_topic(east, held_back, 1)
    values = produce(east, held_back, 10)
    produce(east, kept, 5)
    control = MutableControlLists()
    # A long refresh interval: only the control change can make the worker look again.
    config = write_config(tmp_path, kafka_clusters, [("east", "west")], {
        "topics": f"{prefix}.*", "topics.exclude": held_back, "refresh.topics.interval.seconds": 600})
    with running(config, control) as workers:
        worker = workers["east->west"]
        assert len(remote_values(west, f"east.{kept}", 5)) == 5
        assert set(worker.topics) - {"heartbeats"} == {kept}
        control.update(allow=frozenset({held_back}), deny=frozenset({kept}))
        eventually(lambda: set(worker.topics) - {"heartbeats"} == {held_back}, "the allow/deny change",
                   timeout_s=20)
        assert remote_values(west, f"east.{held_back}", 10) == sorted(values)

