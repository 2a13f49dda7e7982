"""`python -m driver` on real brokers: what disabled replications emit (SRM's driver architecture).

The cluster aliases are unique per run (several aliases may name the same brokers), so the heartbeats,
remote topics and metrics topics of this module cannot be confused with those of other tests sharing
the clusters.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from contract.config import ConfigError, parse_config
from contract.records.mm2 import Heartbeat, WireFormatError
from contract.replication_policy import HEARTBEATS_TOPIC
from driver.__main__ import build_tasks
from stack.processes import REPO_ROOT, ManagedProcess

pytestmark = pytest.mark.integration

INTERVAL_S = 0.2
ANCHOR_BEATS = 10  # heartbeats of the emitting pair seen before judging the silent one


@dataclass(frozen=True)
class HeartbeatDriver:
    emitting: str  # disabled replication, heartbeats on (the default)
    silent: str  # disabled replication, emit.heartbeats.enabled = false
    target: str
    data_topic: str
    process: ManagedProcess


def write_config(path: Path, aliases: dict[str, str], extra: list[str]) -> Path:
    lines = [f"clusters = {', '.join(aliases)}"]
    lines += [f"{alias}.bootstrap.servers = {servers}" for alias, servers in aliases.items()]
    path.write_text("\n".join(lines + extra) + "\n")
    return path


@pytest.fixture(scope="module")
def heartbeat_driver(tmp_path_factory, kafka_clusters: dict[str, str]) -> Iterator[HeartbeatDriver]:
    run = uuid.uuid4().hex[:8]
    emitting, silent, target = f"hbon{run}", f"hboff{run}", f"hbtgt{run}"
    data_topic = f"hbdata-{run}"
    east = kafka_clusters["east"]
    admin = AdminClient({"bootstrap.servers": east})  # must outlive its futures
    admin.create_topics([NewTopic(data_topic, num_partitions=1, replication_factor=1)])[data_topic].result()
    producer = Producer({"bootstrap.servers": east})
    for i in range(10):  # data an enabled replication would copy
        producer.produce(data_topic, value=f"v{i}".encode())
    assert producer.flush(30) == 0
    tmp = tmp_path_factory.mktemp("heartbeats")
    aliases = {emitting: east, silent: east, target: kafka_clusters["west"]}
    config = write_config(tmp / "srm.properties", aliases, [
        f"driver.target.clusters = {target}",
        f"emit.heartbeats.interval.seconds = {INTERVAL_S}",
        "heartbeats.topic.replication.factor = 3",  # MM2's default, more than the one broker here
        "metrics.period = 1",
        "refresh.topics.interval.seconds = 1",
        f"{silent}->{target}.emit.heartbeats.enabled = false",
    ])
    process = ManagedProcess.python_module(f"driver-{run}", "driver", ["--config", str(config)], tmp).start()
    try:
        yield HeartbeatDriver(emitting, silent, target, data_topic, process)
    finally:
        process.stop()
        print(f"--- driver log ---\n{process.log_tail()}")


def read_heartbeats(bootstrap: str, until, timeout_s: float = 60) -> list[tuple[Heartbeat, int, int]]:
    """(heartbeat, partition, record timestamp) of every decodable record, until ``until(list)``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while HEARTBEATS_TOPIC not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{HEARTBEATS_TOPIC} never created on {bootstrap}"
        time.sleep(0.2)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hb-check-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(HEARTBEATS_TOPIC, 0, OFFSET_BEGINNING)])
    beats: list[tuple[Heartbeat, int, int]] = []
    try:
        while not until(beats) and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is not None:
                    continue
                try:  # other writers (service advertisements) share the topic
                    beat = Heartbeat.decode(message.key(), message.value())
                except WireFormatError:
                    continue
                partition = message.partition()
                assert partition is not None  # a record has one
                beats.append((beat, partition, message.timestamp()[1]))
    finally:
        consumer.close()
    return beats


def of_pair(beats: list[tuple[Heartbeat, int, int]], source: str, target: str) -> list:
    return [b for b in beats if (b[0].source_cluster_alias, b[0].target_cluster_alias) == (source, target)]


def topics_on(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_disabled_pair_emits_heartbeats_only(heartbeat_driver: HeartbeatDriver, kafka_clusters):
    d, west = heartbeat_driver, kafka_clusters["west"]
    beats = read_heartbeats(west, lambda got: len(of_pair(got, d.emitting, d.target)) >= ANCHOR_BEATS)
    mine = of_pair(beats, d.emitting, d.target)
    assert len(mine) >= ANCHOR_BEATS, d.process.log_tail()
    assert all(partition == 0 for _, partition, _ in mine)
    assert all(record_ts == beat.timestamp for beat, _, record_ts in mine)
    stamps = [beat.timestamp for beat, _, _ in mine]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert Heartbeat.decode(mine[0][0].encode_key(), mine[0][0].encode_value()) == mine[0][0]

    west_topics = topics_on(west)
    assert not {t for t in west_topics if t.startswith(f"{d.emitting}.")}  # no remote topics
    assert f"srm-metrics.{d.emitting}.internal" not in west_topics  # no metrics of data

    admin = AdminClient({"bootstrap.servers": west})
    assert len(admin.list_topics(HEARTBEATS_TOPIC, timeout=10).topics[HEARTBEATS_TOPIC].partitions) == 1
    resource = ConfigResource(ResourceType.TOPIC, HEARTBEATS_TOPIC)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"


def test_disabled_pair_without_heartbeats_emits_nothing(heartbeat_driver: HeartbeatDriver, kafka_clusters):
    d, west = heartbeat_driver, kafka_clusters["west"]
    # The emitting pair's task started with the silent one's would-be task: its beats bound the wait.
    beats = read_heartbeats(west, lambda got: len(of_pair(got, d.emitting, d.target)) >= ANCHOR_BEATS)
    assert len(of_pair(beats, d.emitting, d.target)) >= ANCHOR_BEATS, d.process.log_tail()
    assert of_pair(beats, d.silent, d.target) == []
    west_topics = topics_on(west)
    assert not {t for t in west_topics if t.startswith(f"{d.silent}.")}
    assert f"srm-metrics.{d.silent}.internal" not in west_topics
    assert "nothing to run" not in d.process.log_tail(200)


def test_driver_stops_cleanly_on_sigterm(heartbeat_driver: HeartbeatDriver):
    process = heartbeat_driver.process
    assert process.running, process.log_tail()
    process.stop(timeout_s=30)
    assert process.process is not None and process.process.returncode == 0, process.log_tail()
    assert "stopped" in process.log_tail(5)


def test_driver_with_bad_config_exits_2_naming_the_setting(tmp_path: Path):
    config = write_config(tmp_path / "bad.properties", {"a": "127.0.0.1:1", "b": "127.0.0.1:2"},
                          ["emit.heartbeats.interval.seconds = often"])
    done = subprocess.run([sys.executable, "-m", "driver", "--config", str(config)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"srm-driver: {config}:4: emit.heartbeats.interval.seconds: "
                                   f"expected a number, got 'often'")


@pytest.mark.parametrize("setting, message", [
    ("heartbeats.topic.replication.factor = 0", "must be -1 (the broker's default) or at least 1"),
    ("a->b.emit.heartbeats.interval.seconds = 0", "must be greater than 0"),
])
def test_bad_heartbeat_settings_are_config_errors_at_start(setting: str, message: str):
    key = setting.split(" =")[0]
    with pytest.raises(ConfigError, match=f"srm.properties:5: {re.escape(key)}: {re.escape(message)}"):
        config = parse_config(f"clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\n"
                              f"b.bootstrap.servers = 127.0.0.1:2\ndriver.target.clusters = b\n{setting}\n",
                              "srm.properties")
        build_tasks(config, threading.Event())
