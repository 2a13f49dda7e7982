"""The checkpoint worker against real brokers: translated MM2 checkpoints, metrics, restart.

The data path is replicated by hand (`manual_replication`) with real MM2 offset syncs, so these tests
exercise the checkpoint side alone.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer

from contract.config import SrmConfig, parse_config
from contract.records import raw_metrics
from contract.records.raw_metrics import GroupMetrics
from contract.replication_policy import metrics_topic
from driver.checkpoint_worker import CheckpointWorker
from stack import srm_properties
from tests.driver.manual_replication import CheckpointLog, ManualReplication, commit, produce, wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 2
SHIFT = 25  # remote partitions start here, so downstream = upstream + 25 where the copy is exact


def worker_config(clusters: dict[str, str], tag: str, **extra: object) -> SrmConfig:
    settings = {"emit.checkpoints.interval.seconds": 0.3, "metrics.period": 1,
                "topics": f".*{tag}.*", "groups": f"g-{tag}.*", **extra}
    return parse_config(srm_properties.render(clusters, [("east", "west")], "redis://127.0.0.1:1/0",
                                              settings), "test.properties")


def start_worker(config: SrmConfig, source: str = "east", target: str = "west") -> tuple[CheckpointWorker,
                                                                                      threading.Event]:
    [replication] = [r for r in config.replications() if (r.source, r.target) == (source, target)]
    stopping = threading.Event()
    worker = CheckpointWorker(config, replication, stopping)
    worker.start()
    return worker, stopping


def stop_worker(worker: CheckpointWorker, stopping: threading.Event) -> None:
    stopping.set()
    worker.join(60)
    assert not worker.is_alive(), "checkpoint worker did not stop"




def assert_translated(harness: ManualReplication, partition: int, upstream: int, downstream: int) -> None:
    """MM2's +1 rule over one of the syncs written at or before `upstream`, and nothing skipped.

    Which sync answers depends on the store's exponentially spaced history (precise near the newest
    sync, coarser for lagging groups), so any sync at or before the offset is a valid basis.
    """
    answers = {down + (0 if up == upstream else 1) for up, down in harness.syncs[partition] if up <= upstream}
    assert downstream in answers, f"{upstream} -> {downstream}: not from a sync ({sorted(answers)})"
    assert downstream <= upstream + SHIFT, f"{upstream} -> {downstream} skips records"


@pytest.fixture
def replicated(kafka_clusters: dict[str, str]) -> Iterator[tuple[ManualReplication, str]]:
    tag = uuid.uuid4().hex[:8]
    harness = ManualReplication(kafka_clusters["east"], kafka_clusters["west"], f"orders-{tag}",
                                f"east.orders-{tag}", "mm2-offset-syncs.west.internal", PARTITIONS)
    harness.create(SHIFT)
    yield harness, tag


def test_checkpoints_follow_commits_while_traffic_flows(kafka_clusters, replicated):
    harness, tag = replicated
    group = f"g-{tag}"
    config = worker_config(kafka_clusters, tag)
    log = CheckpointLog(kafka_clusters["west"], "east.checkpoints.internal")
    worker, stopping = start_worker(config)
    commits: list[dict[int, int]] = []
    try:
        for produced, committed in ((60, 17), (60, 70), (45, 151)):
            produce(kafka_clusters["east"], harness.source_topic, PARTITIONS, produced)
            harness.copy()
            offsets = {p: committed + p for p in range(PARTITIONS)}
            before_ms = int(time.time() * 1000)
            commit(kafka_clusters["east"], group, harness.source_topic, offsets)
            commits.append(offsets)
            log.wait_for(group, {(harness.remote_topic, p): o for p, o in offsets.items()})
            for (_topic, partition), checkpoint in log.latest(group).items():
                assert_translated(harness, partition, checkpoint.upstream_offset,
                                  checkpoint.downstream_offset)
            # The record timestamp is when the offsets were listed: after this commit.
            assert max(ts for c, ts in log.records if c.consumer_group_id == group) >= before_ms

        checkpoints = log.of(group)
        assert {c.topic for c in checkpoints} == {harness.remote_topic}
        for partition in range(PARTITIONS):
            downstream = [c.downstream_offset for c in checkpoints if c.partition == partition]
            assert downstream == sorted(downstream), "checkpoints went backwards"
            assert all(d >= SHIFT for d in downstream)

        metrics = wait_for_group_metrics(kafka_clusters["west"], group, commits[-1])
        for partition, record in metrics.items():
            assert record.topic == harness.remote_topic and record.upstream_topic == harness.source_topic
            # Translation may still improve as syncs arrive, so the record may follow a later checkpoint.
            log.drain()
            assert record.group_downstream_offset in {c.downstream_offset for c in log.of(group)
                                                      if c.partition == partition}
            assert record.group_lag == 165 - commits[-1][partition]  # 60 + 60 + 45 records produced
    finally:
        stop_worker(worker, stopping)
        log.close()


def wait_for_group_metrics(bootstrap: str, group: str, upstream: dict[int, int]) -> dict[int, GroupMetrics]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"m-{uuid.uuid4()}",
                        "auto.offset.reset": "earliest"})
    consumer.subscribe([metrics_topic("east")])
    latest: dict[int, GroupMetrics] = {}
    latency_seen = False
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for message in consumer.consume(200, timeout=0.5):
                value = message.value()
                if message.error() is not None:
                    continue
                assert value is not None, "a metrics record without a value"
                record = raw_metrics.decode(value)
                if isinstance(record, GroupMetrics) and record.group == group:
                    latest[record.partition] = record
                    latency_seen |= record.checkpoint_latency_ms is not None
            if latency_seen and all(p in latest and latest[p].group_upstream_offset == o
                                    for p, o in upstream.items()):
                return latest
    finally:
        consumer.close()
    raise AssertionError(f"no group metrics for {group} at {upstream}: {latest}")


def test_restart_restores_checkpoints_and_skips_bad_records(kafka_clusters, replicated, caplog):
    harness, tag = replicated
    group = f"g-{tag}"
    produce(kafka_clusters["east"], harness.source_topic, PARTITIONS, 40)
    harness.copy()
    commit(kafka_clusters["east"], group, harness.source_topic, {0: 30, 1: 35})
    config = worker_config(kafka_clusters, tag)
    log = CheckpointLog(kafka_clusters["west"], "east.checkpoints.internal")
    worker, stopping = start_worker(config)
    try:
        log.wait_for(group, {(harness.remote_topic, 0): 30, (harness.remote_topic, 1): 35})
    finally:
        stop_worker(worker, stopping)
    # Garbage in both internal topics: the next worker logs and skips it.
    garbage = Producer({"bootstrap.servers": kafka_clusters["east"]})
    garbage.produce("mm2-offset-syncs.west.internal", key=b"\x00", value=b"\x01\x02", partition=0)
    assert garbage.flush(10) == 0
    garbage = Producer({"bootstrap.servers": kafka_clusters["west"]})
    garbage.produce("east.checkpoints.internal", key=b"\x7f\x7f", value=b"?", partition=0)
    assert garbage.flush(10) == 0

    emitted = len(log.of(group))
    worker, stopping = start_worker(config)
    try:
        wait_until(lambda: worker.rounds >= 3, 60, "three checkpoint rounds after the restart")
        skipped = [r.getMessage() for r in caplog.records if ": skipped " in r.getMessage()]
        assert any("east.checkpoints.internal[0]@" in m for m in skipped), skipped
        assert any("mm2-offset-syncs.west.internal[0]@" in m for m in skipped), skipped
        log.poll()
        assert len(log.of(group)) == emitted, "a restored checkpoint was emitted again"
        commit(kafka_clusters["east"], group, harness.source_topic, {0: 40})
        log.wait_for(group, {(harness.remote_topic, 0): 40, (harness.remote_topic, 1): 35})
        assert_translated(harness, 0, 40, log.latest(group)[(harness.remote_topic, 0)].downstream_offset)
    finally:
        stop_worker(worker, stopping)
        log.close()


def test_groups_found_at_start_only_when_group_refresh_is_off(kafka_clusters, replicated):
    # refresh.groups.enabled = false: MM2 checkpoints the groups of its first look-up, no later one.
    harness, tag = replicated
    early, late = f"g-{tag}-early", f"g-{tag}-late"
    produce(kafka_clusters["east"], harness.source_topic, PARTITIONS, 40)
    harness.copy()
    commit(kafka_clusters["east"], early, harness.source_topic, {0: 30, 1: 35})
    log = CheckpointLog(kafka_clusters["west"], "east.checkpoints.internal")
    worker, stopping = start_worker(worker_config(kafka_clusters, tag, **{"refresh.groups.enabled": "false"}))
    try:
        log.wait_for(early, {(harness.remote_topic, 0): 30, (harness.remote_topic, 1): 35})
        commit(kafka_clusters["east"], late, harness.source_topic, {0: 20, 1: 20})
        commit(kafka_clusters["east"], early, harness.source_topic, {0: 40})
        log.wait_for(early, {(harness.remote_topic, 0): 40, (harness.remote_topic, 1): 35})
        rounds = worker.rounds
        wait_until(lambda: worker.rounds >= rounds + 3, 60, "three more checkpoint rounds")
        log.drain()
        assert log.of(late) == [], "a group committed after the first look-up was checkpointed"
    finally:
        stop_worker(worker, stopping)
        log.close()
