"""srm-control on real brokers: live list updates, `--list`, and `offsets --export` from checkpoints.

Cluster aliases are unique per test (aliases may name the same brokers), so the shared
`srm-control.internal` and checkpoint topics of other tests never mix in.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contract.config import SrmConfig, load_config
from contract.records.mm2 import Checkpoint
from contract.replication_policy import CONTROL_TOPIC
from driver.control_cli import main
from driver.control_lists import ControlLists, write_changes
from driver.control_record import ControlChange, ControlEntry
from stack.processes import REPO_ROOT, ManagedProcess

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Pair:
    source: str
    target: str
    path: Path
    config: SrmConfig

    def cli(self, command: str, *argv: str) -> list[str]:
        return [command, "--config", str(self.path), "--source", self.source, "--target", self.target, *argv]


@pytest.fixture
def pair(tmp_path: Path, kafka_clusters: dict[str, str]) -> Pair:
    run = uuid.uuid4().hex[:8]
    source, target = f"csrc{run}", f"ctgt{run}"
    path = tmp_path / "srm.properties"
    path.write_text(f"clusters = {source}, {target}\n{source}.bootstrap.servers = {kafka_clusters['east']}\n"
                    f"{target}.bootstrap.servers = {kafka_clusters['west']}\n"
                    "control.topic.replication.factor = 1\n")
    return Pair(source, target, path, load_config(path))


def eventually(condition: Callable[[], bool], timeout_s: float = 30, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def change(pair: Pair, name: str, present: bool = True, kind: str = "topics",
           list_name: str = "allow") -> ControlChange:
    return ControlChange(ControlEntry(pair.source, pair.target, kind, list_name, name), present, 1)


def test_lists_follow_edits_live_and_skip_bad_records(pair: Pair, kafka_clusters, caplog):
    lists = ControlLists(pair.config, pair.target).start()
    try:
        assert lists.wait_until_loaded(30)
        assert lists.topic_lists(pair.source, pair.target) == (frozenset(), frozenset())
        before = lists.version()
        write_changes(pair.config, pair.target, [
            change(pair, "orders"), change(pair, "test-.*", list_name="deny"),
            change(pair, "billing", kind="groups")], timeout_s=10)
        assert eventually(lambda: lists.version() >= before + 3)
        assert lists.topic_lists(pair.source, pair.target) == (frozenset({"orders"}), frozenset({"test-.*"}))
        assert lists.group_lists(pair.source, pair.target) == (frozenset({"billing"}), frozenset())

        producer = Producer({"bootstrap.servers": kafka_clusters["west"]})
        producer.produce(CONTROL_TOPIC, key=b"not json", value=b"{}", partition=0)
        bad_value_key = change(pair, "x").entry.encode_key()
        producer.produce(CONTROL_TOPIC, key=bad_value_key, value=b"garbage", partition=0)
        assert producer.flush(10) == 0
        after_edits = lists.version()
        write_changes(pair.config, pair.target, [change(pair, "orders", present=False)], timeout_s=10)
        assert eventually(lambda: lists.topic_lists(pair.source, pair.target)[0] == frozenset())
        assert lists.version() == after_edits + 1  # the bad records changed nothing
        assert f"srm-control reader of {pair.target}: skipped srm-control.internal[0]@" in caplog.text
        assert "x" not in lists.topic_lists(pair.source, pair.target)[0]
    finally:
        lists.stop()

    fresh = ControlLists(pair.config, pair.target).start()  # a restarted driver reads the same lists
    try:
        assert fresh.wait_until_loaded(30)
        assert fresh.topic_lists(pair.source, pair.target) == (frozenset(), frozenset({"test-.*"}))
        assert fresh.group_lists(pair.source, pair.target) == (frozenset({"billing"}), frozenset())
    finally:
        fresh.stop()


def test_poison_records_are_counted_and_the_lists_go_on(pair: Pair, kafka_clusters):
    # Deep nesting made json.loads raise RecursionError, which ended the reader thread: the lists
    # stopped following edits for good. A 1 MB value was read whole.
    lists = ControlLists(pair.config, pair.target).start()
    try:
        assert lists.wait_until_loaded(30)
        rejected_before = lists.guard.rejected
        producer = Producer({"bootstrap.servers": kafka_clusters["west"], "message.max.bytes": 2_000_000})
        producer.produce(CONTROL_TOPIC, key=b"[" * 3000, value=b"{}", partition=0)
        producer.produce(CONTROL_TOPIC, key=change(pair, "big").entry.encode_key(), value=b" " * 1_000_000,
                         partition=0)
        assert producer.flush(10) == 0
        before = lists.version()
        write_changes(pair.config, pair.target, [change(pair, "after-poison")], timeout_s=10)
        assert eventually(lambda: lists.version() > before)
        assert lists.topic_lists(pair.source, pair.target)[0] == frozenset({"after-poison"})
        assert lists.is_alive() and lists.failure is None
        assert lists.guard.rejected - rejected_before == 2
        assert "more than the cap of 256" in (lists.guard.last_rejection or "")
    finally:
        lists.stop()


def test_cli_list_shows_what_was_added_and_removed(pair: Pair, capsys):
    assert main(pair.cli("topics", "--add", "orders,payments", "--add-blacklist", "test-.*")) == 0
    assert main(pair.cli("topics", "--remove", "orders", "--add-denylist", "tmp-1", "--list")) == 0
    assert main(pair.cli("groups", "--add-allowlist", "billing", "--list")) == 0
    out = capsys.readouterr().out
    route = f"{pair.source}->{pair.target}"
    assert f"added to the topics allow list of {route}: payments\n" in out
    assert f"removed from the topics allow list of {route}: orders\n" in out
    assert (f"topics allow list of {route} (1):\n  payments\n"
            f"topics deny list of {route} (2):\n  test-.*\n  tmp-1\n") in out
    assert f"groups allow list of {route} (1):\n  billing\ngroups deny list of {route} (0):\n" in out


def test_offsets_export_prints_the_latest_checkpoints_of_the_group(pair: Pair, kafka_clusters, capsys,
                                                                   caplog):
    topic = f"{pair.source}.checkpoints.internal"
    admin = AdminClient({"bootstrap.servers": kafka_clusters["west"]})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"cleanup.policy": "compact"})])[topic].result()
    remote = f"{pair.source}.orders"
    checkpoints = [
        Checkpoint("billing", remote, 0, 100, 90),
        Checkpoint("billing", remote, 1, 50, 45, "meta"),
        Checkpoint("reporting", remote, 0, 7, 7),
        Checkpoint("billing", f"{pair.source}.payments", 2, 8, 7),
        Checkpoint("billing", remote, 0, 120, 110),  # newer: replaces the first
    ]
    producer = Producer({"bootstrap.servers": kafka_clusters["west"]})
    for checkpoint in checkpoints[:3]:
        producer.produce(topic, key=checkpoint.encode_key(), value=checkpoint.encode_value(), partition=0)
    producer.produce(topic, key=b"\x00\x07bi", value=b"\x00", partition=0)  # undecodable: skipped
    for checkpoint in checkpoints[3:]:
        producer.produce(topic, key=checkpoint.encode_key(), value=checkpoint.encode_value(), partition=0)
    assert producer.flush(10) == 0

    assert main(pair.cli("offsets", "--group", "billing", "--export")) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{remote},0,110\n{remote},1,45\n{pair.source}.payments,2,7\n"
    assert f"skipping undecodable checkpoint {topic}[0]@3" in caplog.text

    assert main(pair.cli("offsets", "--group", "nobody", "--export")) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "nothing to export: no checkpoints of group 'nobody'" in captured.err


def count_records(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (sum of end offsets), 0 while the topic does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4()}"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in metadata.partitions]
        return sum(end[1] for end in ends if end is not None)
    except KafkaException:  # a topic created a moment ago may not have a leader yet
        return 0
    finally:
        consumer.close()


def test_cli_add_makes_an_excluded_topic_replicate_on_a_running_driver(tmp_path: Path, kafka_clusters):
    run = uuid.uuid4().hex[:8]
    source, target = f"lsrc{run}", f"ltgt{run}"
    kept, excluded = f"live-{run}-kept", f"live-{run}-excluded"
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    admin = AdminClient({"bootstrap.servers": east})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (kept, excluded)]).values():
        future.result()
    producer = Producer({"bootstrap.servers": east})
    for i in range(20):
        producer.produce(kept if i % 2 else excluded, key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    path = tmp_path / "srm.properties"
    path.write_text("\n".join([
        f"clusters = {source}, {target}", f"{source}.bootstrap.servers = {east}",
        f"{target}.bootstrap.servers = {west}", f"driver.target.clusters = {target}",
        f"{source}->{target}.enabled = true", f"{source}->{target}.topics = live-{run}-.*",
        f"{source}->{target}.topics.exclude = {excluded}",
        # Only an srm-control change can bring the excluded topic in during this test.
        "refresh.topics.interval.seconds = 600", "metrics.period = 1", "replication.factor = 1",
        "heartbeats.topic.replication.factor = 1", "control.topic.replication.factor = 1"]) + "\n")
    driver = ManagedProcess.python_module(f"driver-{run}", "driver", ["--config", str(path)], tmp_path)
    driver.start()
    try:
        assert eventually(lambda: count_records(west, f"{source}.{kept}") == 10, 90, 0.5), driver.log_tail()
        assert count_records(west, f"{source}.{excluded}") == 0
        done = subprocess.run([sys.executable, "-m", "driver.control_cli", "topics", "--config", str(path),
                               "--source", source, "--target", target, "--add", excluded],
                              capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
        assert done.returncode == 0, done.stderr
        replicated = eventually(lambda: count_records(west, f"{source}.{excluded}") == 10, 90, 0.5)
        assert replicated, driver.log_tail()
        assert driver.running
    finally:
        driver.stop()
        print(f"--- driver log ---\n{driver.log_tail()}")
