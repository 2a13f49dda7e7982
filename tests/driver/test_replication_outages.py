"""A real `srm-driver` under load while its target cluster is down for 30 s, and while its source broker
restarts: nothing lost, memory bounded, the worker stays in its group with its partitions paused, the
outage is reported while it lasts, and copying resumes within 10 s of the cluster's return. And a
driver syncing group offsets into a target that is down longer than an admin request's timeout lives
on (librdkafka 2.16 aborted the process there) and syncs again once the target is back.

Both clusters are this module's own (the session's cannot be stopped), restarted on the same ports with
their data.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from aggregator.cluster_watch import ClusterWatch
from contract import redis_layout as layout
from contract.records import raw_metrics
from contract.replication_policy import metrics_topic
from contract.status import ReplicationState
from driver.replication import group_id
from service.health.replication_health import latest_report
from service.health.replication_status import replication_state
from service.metrics_reader import MetricsReader
from stack import srm_properties
from stack.kafka_cluster import KafkaClusters
from stack.processes import ManagedProcess
from tests.driver.manual_replication import commit
from tests.driver.replication_cluster_ops import (
    copied_values,
    create_topic,
    eventually,
    partition_ends,
    produce,
    read_topic,
)
from tests.driver.test_replication_recovery import members_holding_partitions

pytestmark = pytest.mark.integration

PARTITIONS = 4
RATE_PER_S = 10_000
VALUE_BYTES = 400
OUTAGE_S = 30
GROUP_OUTAGE_S = 50  # longer than an admin request's 30 s, from the first sync while down to the return
RESUME_WITHIN_S = 10.0
# The driver's peak RSS: Python + librdkafka (~80 MB) + the 16 MiB send queue + the 8 MiB prefetch, with
# room for a loaded machine. librdkafka's defaults (1 GiB of queue, 64 MiB of prefetch) would let a 30 s
# outage at 4 MB/s (120 MB) fill well past it.
MAX_RSS_MB = 200
SETTINGS = {"metrics.period": 2, "refresh.topics.interval.seconds": 5, "emit.heartbeats.enabled": "false",
            "emit.checkpoints.enabled": "false", "replication.queue.max.bytes": 16 * 1024 * 1024,
            "replication.fetch.queue.max.bytes": 8 * 1024 * 1024}


@pytest.fixture(scope="module")
def clusters() -> Iterator[KafkaClusters]:
    own = KafkaClusters(["east", "west"]).start()
    try:
        yield own
    finally:
        own.cleanup()


class Load(threading.Thread):
    """Writes RATE_PER_S records of VALUE_BYTES, each value unique, until stopped; keeps writing through
    a source outage (librdkafka buffers and retries)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name=f"load-{topic}")
        self.topic, self.stopping, self.sent = topic, threading.Event(), 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                                  "queue.buffering.max.messages": 2_000_000,
                                  "queue.buffering.max.kbytes": 1_048_576, "message.timeout.ms": 300_000})
        self.failed = 0

    def run(self) -> None:
        began, tick = time.monotonic(), 0.02
        while not self.stopping.is_set():
            due = int((time.monotonic() - began) * RATE_PER_S)
            while self.sent < due:
                value = f"{self.sent:012d}".encode().ljust(VALUE_BYTES, b".")
                self.producer.produce(self.topic, value, partition=self.sent % PARTITIONS,
                                      on_delivery=self._delivered)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(tick)

    def _delivered(self, error: object, _message: object) -> None:
        if error is not None:
            self.failed += 1

    def finish(self) -> int:
        self.stopping.set()
        self.join(30)
        assert self.producer.flush(120) == 0, "the load producer could not deliver everything"
        assert self.failed == 0, f"{self.failed} load records failed"
        return self.sent


def end_offsets(bootstrap: str, topic: str) -> int:
    """Records in the topic (-1 while it does not exist or the broker does not answer)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(PARTITIONS))
    except KafkaException:
        return -1
    finally:
        consumer.close()


def load_values(sent: int) -> list[bytes]:
    """The values `Load` wrote, in order: its record i carries i."""
    return [f"{i:012d}".encode().ljust(VALUE_BYTES, b".") for i in range(sent)]


def distinct_values(bootstrap: str, topic: str, sent: int) -> set[bytes]:
    return {v for v in copied_values(bootstrap, topic, load_values(sent), timeout_s=300) if v is not None}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def replication_reports(bootstrap: str) -> list[raw_metrics.ReplicationMetrics]:
    decoded = (raw_metrics.decode(r.value) for r in read_topic(bootstrap, metrics_topic("east"), None)
               if r.value is not None)
    return [m for m in decoded if isinstance(m, raw_metrics.ReplicationMetrics)]


def start_driver(clusters: KafkaClusters, tmp_path: Path, topic: str,
                 settings: dict[str, object] | None = None) -> ManagedProcess:
    bootstraps = {alias: clusters.bootstrap(alias) for alias in ("east", "west")}
    srm_properties.write(tmp_path / "srm.properties", bootstraps, [("east", "west")], "redis://127.0.0.1:1/0",
                         {**SETTINGS, "topics": topic, **(settings or {})})
    return ManagedProcess.python_module("driver-outage", "driver",
                                        ["--config", str(tmp_path / "srm.properties")], tmp_path).start()


def wait_for_growth(bootstrap: str, topic: str, since: float, what: str) -> float:
    """Seconds from `since` until the remote topic grows (checked every 0.2 s)."""
    before = end_offsets(bootstrap, topic)
    eventually(lambda: end_offsets(bootstrap, topic) > before, what, timeout_s=60)
    return time.monotonic() - since


def api_state(client: redis.Redis) -> tuple[ReplicationState, str]:
    """The replication's state as the service derives it from Redis."""
    latest = MetricsReader(client).replication_latest([("east", "west")])[("east", "west")]
    return replication_state(latest_report(latest), int(time.time() * 1000), 2000)


def test_target_down_30s_under_load(clusters: KafkaClusters, redis_url: str, tmp_path: Path) -> None:
    east, west = clusters.bootstrap("east"), clusters.bootstrap("west")
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    remote = f"east.{topic}"
    create_topic(east, topic, PARTITIONS)
    driver = start_driver(clusters, tmp_path, topic)
    assert driver.process is not None
    load = Load(east, topic)
    # The aggregator's probe of the target (its Spark query is not needed for it) and its record of the
    # replication's last report, as it keeps them in Redis.
    client = redis.Redis.from_url(redis_url)
    client.hset(layout.replication_status_key("west", "east"), "replication", layout.encode_latest(
        {"ts": int(time.time() * 1000), "period_ms": 2000, "status": "RUNNING", "enabled": True,
         "recent_record_counts": [100]}))
    probing = threading.Event()
    ClusterWatch(client, {"west": AdminClient({"bootstrap.servers": west})}, probing, interval_s=1).start()
    try:
        load.start()
        eventually(lambda: end_offsets(west, remote) >= 5 * RATE_PER_S, "the copy under way", timeout_s=120)
        clusters["west"].stop()
        down_at = time.monotonic()
        outage_began_ms = int(time.time() * 1000)
        holding, states = [], []
        while time.monotonic() - down_at < OUTAGE_S:
            holding.append(members_holding_partitions(east, group_id("east", "west")))
            states.append(api_state(client))
            assert driver.running, driver.log_tail()
            time.sleep(5)
        clusters["west"].start()
        resumed_s = wait_for_growth(west, remote, time.monotonic(), "the copy resuming")
        sent = load.finish()
        copied = distinct_values(west, remote, sent)
        log = driver.log_file.read_text(errors="replace")
        rss_mb = peak_rss_mb(driver.process.pid)
        reports = replication_reports(west)
    finally:
        probing.set()
        load.stopping.set()
        driver.stop()
    print(f"target outage: {sent} records, resumed {resumed_s:.1f} s after the broker was back, "
          f"driver peak RSS {rss_mb:.0f} MB")
    missing = set(load_values(sent)) - copied
    assert not missing, f"{len(missing)} of {sent} records lost, e.g. {sorted(missing)[:3]}"
    assert set(holding) == {1}, f"the worker left its group during the outage: {holding}"
    shown = [detail for state, detail in states[2:] if state is ReplicationState.FAILED]
    assert len(shown) == len(states) - 2, f"the API's state 10 s into the outage and on: {states}"
    assert "target cluster unreachable" in shown[-1]
    assert "source partition(s) paused" in log and "acknowledged nothing for" in log, log[-3000:]
    failed = [r for r in reports if r.status == "FAILED" and r.ts >= outage_began_ms]
    assert failed and "target cluster 'west' acknowledged nothing" in (failed[0].error or "")
    assert reports[-1].status == "RUNNING", "the status after the outage"
    assert resumed_s <= RESUME_WITHIN_S
    assert rss_mb <= MAX_RSS_MB


def test_source_broker_restart_under_load(clusters: KafkaClusters, tmp_path: Path) -> None:
    east, west = clusters.bootstrap("east"), clusters.bootstrap("west")
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    remote = f"east.{topic}"
    create_topic(east, topic, PARTITIONS)
    driver = start_driver(clusters, tmp_path, topic)
    assert driver.process is not None
    load = Load(east, topic)
    try:
        load.start()
        eventually(lambda: end_offsets(west, remote) >= 5 * RATE_PER_S, "the copy under way", timeout_s=120)
        clusters["east"].stop()
        down_ms = int(time.time() * 1000)

        def outage_reported() -> list[raw_metrics.ReplicationMetrics]:
            return [r for r in replication_reports(west) if r.ts >= down_ms and r.status == "FAILED"
                    and "source cluster 'east' unreachable" in (r.error or "")]

        reported = eventually(outage_reported, "the outage in the replication's status", timeout_s=45)
        clusters["east"].start()
        resumed_s = wait_for_growth(west, remote, time.monotonic(), "the copy resuming")
        sent = load.finish()
        copied = distinct_values(west, remote, sent)
        back = eventually(lambda: replication_reports(west)[-1].status == "RUNNING", "RUNNING again")
        rss_mb = peak_rss_mb(driver.process.pid)
    finally:
        load.stopping.set()
        driver.stop()
    print(f"source restart: {sent} records, resumed {resumed_s:.1f} s after the broker was back, "
          f"driver peak RSS {rss_mb:.0f} MB, outage reported: {reported[0].error}")
    missing = set(load_values(sent)) - copied
    assert not missing, f"{len(missing)} of {sent} records lost, e.g. {sorted(missing)[:3]}"
    assert back
    assert resumed_s <= RESUME_WITHIN_S
    assert rss_mb <= MAX_RSS_MB



def synced_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of `topic` (read as a consumer reads them, not through an admin
    client: this test's own process must not be exposed to what it tests)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
    except KafkaException:
        return {}
    finally:
        consumer.close()


def test_group_offset_sync_lives_through_a_target_outage(clusters: KafkaClusters, tmp_path: Path) -> None:
    """West is down longer than a group request's wait (30 s): librdkafka must not time such a request
    out itself and then meet the coordinator again on the same client (its issue 4605: an abort)."""
    east, west = clusters.bootstrap("east"), clusters.bootstrap("west")
    tag = uuid.uuid4().hex[:8]
    topic, group = f"synced-{tag}", f"app-{tag}"
    remote = f"east.{topic}"
    create_topic(east, topic, PARTITIONS)
    produce(east, topic, 400, tag)
    commit(east, group, topic, dict.fromkeys(range(PARTITIONS), 20))
    driver = start_driver(clusters, tmp_path, topic, {
        "emit.checkpoints.enabled": "true", "emit.checkpoints.interval.seconds": 1, "groups": group,
        "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": 1})
    try:
        before = eventually(lambda: synced_offsets(west, group, remote) or None, "the group's first sync",
                            timeout_s=120)
        clusters["west"].stop()
        down_at = time.monotonic()
        while time.monotonic() - down_at < GROUP_OUTAGE_S:
            assert driver.running, driver.log_tail()
            time.sleep(5)
        clusters["west"].start()
        # New records and a commit at their end: a checkpoint that must move past the one before.
        produce(east, topic, 400, f"{tag}-after")
        eventually(lambda: end_offsets(west, remote) >= 800 or None, "the new records copied", timeout_s=120)
        commit(east, group, topic, partition_ends(east, topic, PARTITIONS))

        def moved() -> dict[int, int] | None:
            assert driver.running, driver.log_tail()
            now = synced_offsets(west, group, remote)
            return now if len(now) == PARTITIONS and all(now[p] > before.get(p, 0) for p in now) else None

        after = eventually(moved, "the group synced again after the outage", timeout_s=180)
        log = driver.log_file.read_text(errors="replace")
    finally:
        driver.stop()
    print(f"group sync through a {GROUP_OUTAGE_S} s target outage: {before} -> {after}")
    # The outage reached the checkpoint rounds (else this test proved nothing). Which request of a round
    # meets it is timing: a round asks west for metadata before its group requests, so a group request
    # meets the outage only when west stops between the two (a fresh-clone CI run saw only the metadata
    # request fail). The drop of a client whose group request went unanswered is shown without timing in
    # tests/clients/test_group_admin.py; here, that the process lives and syncs again.
    met = ("checkpoint round of east->west failed: cluster 'west'", "west: no answer to a request for")
    assert any(line in log for line in met), log[-3000:]
