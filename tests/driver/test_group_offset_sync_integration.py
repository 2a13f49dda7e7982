"""Failover and failback through automatically synced group offsets, against real brokers.

A group consumes `t` on east while traffic flows and is replicated (by hand, with real MM2 offset
syncs) to `east.t` on west. The checkpoint worker east -> west syncs its offsets into the idle west
group, from which a consumer resumes without skipping anything; an active west group is never
overwritten. Failing back, the worker west -> east translates the west group's offsets on `east.t`
back to `t` on east, and a consumer there resumes the same way.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from contract.config import SrmConfig, parse_config
from contract.replication_policy import progress_topic
from driver.checkpoint_worker import CheckpointWorker
from driver.replication import ReplicationWorker
from stack import srm_properties
from tests.driver.manual_replication import (
    CheckpointLog,
    ManualReplication,
    commit,
    create_topic,
    produce,
    read_syncs,
    upstream_of,
    wait_until,
)

pytestmark = pytest.mark.integration

PARTITIONS = 2
SHIFT = 30  # west's east.t partitions start at 30: a west offset is the east offset + 30


def both_ways_config(clusters: dict[str, str], tag: str) -> SrmConfig:
    settings = {"emit.checkpoints.interval.seconds": 0.3, "sync.group.offsets.enabled": "true",
                "sync.group.offsets.interval.seconds": 0.3, "metrics.period": 5,
                "topics": f".*{tag}.*", "groups": f"g-{tag}.*"}
    text = srm_properties.render(clusters, [("east", "west"), ("west", "east")], "redis://127.0.0.1:1/0",
                                 settings)
    return parse_config(text, "test.properties")


class RunningWorker:
    def __init__(self, config: SrmConfig, source: str, target: str) -> None:
        [replication] = [r for r in config.replications() if (r.source, r.target) == (source, target)]
        self.stopping = threading.Event()
        self.worker = CheckpointWorker(config, replication, self.stopping)
        self.worker.start()

    def stop(self) -> None:
        self.stopping.set()
        self.worker.join(60)
        assert not self.worker.is_alive(), "checkpoint worker did not stop"


def settle(worker: CheckpointWorker, log: CheckpointLog) -> None:
    """Two more checkpoint rounds, then every checkpoint they emitted is in `log`."""
    rounds = worker.rounds
    wait_until(lambda: worker.rounds >= rounds + 2, 60, "two checkpoint rounds")
    log.drain()



def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
    finally:
        consumer.close()



def group_consumer(bootstrap: str, group: str, topic: str, reset: str = "latest") -> Consumer:
    # "latest" after failover: a consumer that found no synced offset would skip everything, and fail.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": reset})
    consumer.subscribe([topic])
    return consumer


def consume(consumer: Consumer, count: int, timeout_s: float = 60) -> list[Message]:
    records: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += [m for m in consumer.consume(count - len(records), timeout=0.5) if m.error() is None]
    assert len(records) == count, f"consumed {len(records)} of {count}"
    return records


def by_partition(records: list) -> dict[int, list[int]]:
    """Upstream (east) offsets consumed, per partition, in order."""
    result: dict[int, list[int]] = {}
    for message in records:
        result.setdefault(message.partition(), []).append(upstream_of(message))
    return result


def test_failover_and_failback_through_synced_group_offsets(kafka_clusters):
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    tag = uuid.uuid4().hex[:8]
    group, active_group = f"g-{tag}", f"g-{tag}-active"
    harness = ManualReplication(east, west, f"t-{tag}", f"east.t-{tag}", "mm2-offset-syncs.west.internal",
                                PARTITIONS)
    harness.create(SHIFT)
    config = both_ways_config(kafka_clusters, tag)
    forward_log = CheckpointLog(west, "east.checkpoints.internal")
    back_log = CheckpointLog(east, "west.checkpoints.internal")
    forward = RunningWorker(config, "east", "west")
    workers, consumers = [forward], []
    try:
        # The group consumes on east and commits at several points while traffic flows.
        east_consumer = group_consumer(east, group, harness.source_topic, reset="earliest")
        consumers.append(east_consumer)
        for batch in (50, 50, 50):
            produce(east, harness.source_topic, PARTITIONS, batch)
            harness.copy()
            # 90 of 300 in all: each partition stays well behind where the group fails back from.
            consume(east_consumer, 30)
            east_consumer.commit(asynchronous=False)
        east_consumer.close()
        consumers.remove(east_consumer)
        upstream = committed(east, group, harness.source_topic)
        settle(forward.worker, forward_log)

        # Group offset sync: the idle west group receives the latest checkpoints.
        def latest_synced() -> bool:
            forward_log.drain()
            return committed(west, group, harness.remote_topic) == {
                p: c.downstream_offset for (_, p), c in forward_log.latest(group).items()}

        wait_until(latest_synced, 60, f"west offsets of {group} synced to its latest checkpoints")
        latest = forward_log.latest(group)
        synced = {p: latest[(harness.remote_topic, p)].downstream_offset for p in upstream}
        for partition, offset in upstream.items():
            # A checkpoint is only emitted when its downstream offset advances, so the latest one may
            # carry an earlier commit of the group; it never points past the records consumed.
            checkpoint = latest[(harness.remote_topic, partition)]
            assert checkpoint.upstream_offset <= offset
            answers = {d + (0 if u == checkpoint.upstream_offset else 1)
                       for u, d in harness.syncs[partition] if u <= checkpoint.upstream_offset}
            assert synced[partition] in answers and synced[partition] <= offset + SHIFT

        # Failover: a consumer on west resumes from the synced offsets, skipping nothing.
        west_consumer = group_consumer(west, group, harness.remote_topic)
        consumers.append(west_consumer)
        remaining = sum(150 - synced[p] + SHIFT for p in upstream)
        resumed = by_partition(consume(west_consumer, remaining))
        for partition, offset in upstream.items():
            assert resumed[partition] == list(range(synced[partition] - SHIFT, 150)), "skipped or reordered"
            assert resumed[partition][0] <= offset

        # An active west group is never overwritten, even though its east offsets are newer.
        active = group_consumer(west, active_group, harness.remote_topic)
        consumers.append(active)
        wait_until(lambda: bool(active.poll(0.2) or active.assignment()), 60, "an active member")
        active.commit(offsets=[TopicPartition(harness.remote_topic, p, SHIFT) for p in range(PARTITIONS)],
                      asynchronous=False)
        commit(east, active_group, harness.source_topic, {p: 100 for p in range(PARTITIONS)})
        forward_log.wait_for(active_group, {(harness.remote_topic, p): 100 for p in range(PARTITIONS)})
        rounds = forward.worker.group_sync_rounds
        wait_until(lambda: forward.worker.group_sync_rounds >= rounds + 2, 60, "two group sync rounds")
        assert committed(west, active_group, harness.remote_topic) == {p: SHIFT for p in range(PARTITIONS)}

        # Failback: the west group's progress on east.t is checkpointed back to t on east.
        back_at = {p: SHIFT + 140 + p for p in range(PARTITIONS)}  # west offsets: east 140 and 141
        west_consumer.commit(offsets=[TopicPartition(harness.remote_topic, p, o) for p, o in back_at.items()],
                             asynchronous=False)
        west_consumer.close()
        consumers.remove(west_consumer)
        workers.append(RunningWorker(config, "west", "east"))
        back_log.wait_for(group, {(harness.source_topic, p): o for p, o in back_at.items()})
        assert {c.topic for c in back_log.of(group)} == {harness.source_topic}
        assert {c.topic for c in forward_log.of(group)} == {harness.remote_topic}
        returned = {p: c.downstream_offset for (_, p), c in back_log.latest(group).items()}
        for partition, west_offset in back_at.items():
            answers = {u + (0 if d == west_offset else 1) for u, d in harness.syncs[partition]
                       if d <= west_offset}
            assert returned[partition] in answers and returned[partition] <= west_offset - SHIFT
        wait_until(lambda: committed(east, group, harness.source_topic) == returned, 60,
                   f"east offsets of {group} synced back to {returned}")
        back_consumer = group_consumer(east, group, harness.source_topic)
        consumers.append(back_consumer)
        again = by_partition(consume(back_consumer, sum(150 - o for o in returned.values())))
        for partition, offset in returned.items():
            assert again[partition] == list(range(offset, 150))
            assert offset <= back_at[partition] - SHIFT
    finally:
        for consumer in consumers:
            consumer.close()
        for worker in workers:
            worker.stop()
        forward_log.close()
        back_log.close()


def has_leaders(bootstrap: str, topic: str) -> bool:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics.get(topic)
    return (metadata is not None and metadata.error is None and bool(metadata.partitions)
            and all(p.leader >= 0 for p in metadata.partitions.values()))


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """End offset per partition; empty while the topic does not exist yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4()}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    except KafkaException:
        return {}
    finally:
        consumer.close()


def test_failover_with_the_replication_data_path(kafka_clusters):
    """The same failover, with the driver's own replication emitting the offset syncs."""
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    tag = uuid.uuid4().hex[:8]
    topic, group = f"live-{tag}", f"g-{tag}"
    remote = f"east.{topic}"
    settings = {"emit.checkpoints.interval.seconds": 0.3, "sync.group.offsets.enabled": "true",
                "sync.group.offsets.interval.seconds": 0.3, "metrics.period": 5, "offset.lag.max": 10,
                "refresh.topics.interval.seconds": 1, "topics": f".*{tag}.*", "groups": f"g-{tag}.*"}
    config = parse_config(srm_properties.render(kafka_clusters, [("east", "west")], "redis://127.0.0.1:1/0",
                                                settings), "test.properties")
    [replication] = [r for r in config.replications() if r.name == "east->west"]
    stopping = threading.Event()
    checkpoints = CheckpointWorker(config, replication, stopping)
    threads = [ReplicationWorker(config, replication, stopping), checkpoints]
    log = CheckpointLog(west, "east.checkpoints.internal")
    for thread in threads:
        thread.start()
    east_consumer = None
    try:
        # The application's topic appears once the driver runs (as in production), after the driver's
        # own progress topic has leaders: the data path does not yet retry a ListOffsets that a
        # just-created topic answers with NOT_LEADER_FOR_PARTITION (reported to its owner).
        wait_until(lambda: has_leaders(west, progress_topic("east")), 60, "the progress topic's leaders")
        create_topic(east, topic, PARTITIONS)
        east_consumer = group_consumer(east, group, topic, reset="earliest")
        # The data path coalesces offset syncs (one per partition and flush, MM2 keeps only the latest
        # pending one too), so the group commits once each batch is replicated: offsets at or after a
        # sync are what can be translated.
        for batch, consumed in enumerate((160, 160, 100)):
            produce(east, topic, PARTITIONS, 80, first=80 * batch)
            replicated = {p: 80 * (batch + 1) for p in range(PARTITIONS)}
            wait_until(lambda want=replicated: end_offsets(west, remote) == want, 90,
                       f"{remote} at {replicated}")
            consume(east_consumer, consumed)
            east_consumer.commit(asynchronous=False)
        upstream = committed(east, group, topic)

        def latest_synced() -> bool:
            settle(checkpoints, log)
            latest = log.latest(group)
            return len(latest) == PARTITIONS and committed(west, group, remote) == {
                p: c.downstream_offset for (_, p), c in latest.items()}

        wait_until(latest_synced, 90, f"west offsets of {group} synced to its latest checkpoints")
        latest = log.latest(group)
        syncs = read_syncs(east, "mm2-offset-syncs.west.internal", topic)
        for partition, offset in upstream.items():
            checkpoint = latest[(remote, partition)]
            assert checkpoint.upstream_offset <= offset
            answers = {d + (0 if u == checkpoint.upstream_offset else 1)
                       for u, d in syncs[partition] if u <= checkpoint.upstream_offset}
            assert checkpoint.downstream_offset in answers

        west_consumer = group_consumer(west, group, remote)
        try:
            synced = committed(west, group, remote)
            records = consume(west_consumer, sum(240 - o for o in synced.values()))
        finally:
            west_consumer.close()
        resumed: dict[int, list[int]] = {}
        for message in records:
            resumed.setdefault(message.partition(), []).append(int(message.value().split(b"-")[1]))
        for partition, offset in upstream.items():
            values = resumed.get(partition, [])
            assert values == list(range(240 - len(values), 240)), "skipped or reordered"
            assert 240 - len(values) <= offset, "records skipped at failover"
    finally:
        if east_consumer is not None:
            east_consumer.close()
        stopping.set()
        for thread in threads:
            thread.join(60)
        log.close()
        assert not any(thread.is_alive() for thread in threads), "a worker did not stop"
