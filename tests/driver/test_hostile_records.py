"""Poison in the driver's internal topics, on real brokers: counted and skipped, never a stuck worker.

Before the guard, ``b"[" * 3000`` in ``mm2-offsets.<src>.internal`` raised RecursionError out of the
progress reader, the replication worker reported FAILED and retried, re-reading the same record
forever; an offset of 10**30 was taken and later overflowed the seek. Offset syncs and checkpoints
with illegal names or negative offsets were stored.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from contract.records.mm2 import Checkpoint, OffsetSync
from driver.checkpoint_rules import CheckpointDecider
from driver.checkpoint_worker import _apply_sync
from driver.internal_topic_feed import OFFSET_SYNC_CAPS, InternalTopicFeed, checked_checkpoint
from driver.offset_sync_store import OffsetSyncStore
from driver.progress_reader import ProgressReader
from driver.progress_record import SourcePartition, encode_key, encode_value

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                  config={"cleanup.policy": "compact"})])[name].result()
    return name


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(10) == 0


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"hostile-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, **extra})


def test_poison_progress_records_are_skipped_and_the_valid_offset_read(kafka_clusters):
    bootstrap = kafka_clusters["west"]
    source = f"hsrc{uuid.uuid4().hex[:8]}"
    topic = _topic(bootstrap, f"mm2-offsets.{source}.internal", partitions=3)
    valid_key = encode_key(SourcePartition(source, "orders", 0))
    _produce(bootstrap, topic, [
        (b"[" * 3000, encode_value(1)),  # deep nesting: RecursionError out of json.loads
        (encode_key(SourcePartition(source, "orders", 1)), b'{"offset":' + b"1" + b"0" * 30 + b"}"),
        (encode_key(SourcePartition(source, "*", 0)), encode_value(5)),  # not a topic name
        (valid_key, encode_value(41)),
    ])
    reader = ProgressReader(_consumer(bootstrap, **{"enable.partition.eof": True,
                                                     "isolation.level": "read_committed"}),
                            AdminClient({"bootstrap.servers": bootstrap}), topic, source)
    try:
        reader.read_to_end(30)
        assert reader.last_replicated("orders", 0) == 41
        assert reader.last_replicated("orders", 1) is None
        assert reader.skipped == 3
        assert "progress key topic" in (reader.guard.last_rejection or "")
    finally:
        reader.close()


def test_forged_offset_syncs_and_checkpoints_are_skipped(kafka_clusters):
    bootstrap = kafka_clusters["west"]
    run = uuid.uuid4().hex[:8]
    syncs_topic = _topic(bootstrap, f"mm2-offset-syncs.h{run}.internal")
    _produce(bootstrap, syncs_topic, [
        (OffsetSync("*", 0, 5, 5).encode_key(), OffsetSync("*", 0, 5, 5).encode_value()),
        (OffsetSync("orders", 0, 10, 7).encode_key(), b"\x00" * 2000),  # over the value cap
        (OffsetSync("orders", 0, 10, 7).encode_key(), OffsetSync("orders", 0, 10, 7).encode_value()),
    ])
    store = OffsetSyncStore()
    feed = InternalTopicFeed(_consumer(bootstrap), "west", syncs_topic,
                             lambda message: _apply_sync(store, None, message), **OFFSET_SYNC_CAPS)
    try:
        assert feed.read_to_end(threading.Event(), 30)
    finally:
        feed.close()
    assert feed.skipped == 2
    assert store.syncs("*", 0) == ()
    assert store.syncs("orders", 0) != ()

    checkpoints_topic = _topic(bootstrap, f"h{run}.checkpoints.internal")
    forged = Checkpoint("billing", "h.orders", 0, 2**62, -5)
    genuine = Checkpoint("billing", "h.orders", 1, 100, 90)
    _produce(bootstrap, checkpoints_topic, [(forged.encode_key(), forged.encode_value()),
                                            (b"\x00\x07bi", b"\x00"),
                                            (genuine.encode_key(), genuine.encode_value())])
    decider = CheckpointDecider()

    def restore(message) -> None:  # as CheckpointWorker._restore_one
        checkpoint = checked_checkpoint(Checkpoint.decode(message.key(), message.value()))
        decider.restore(checkpoint.consumer_group_id, checkpoint.topic, checkpoint.partition,
                        checkpoint.upstream_offset, checkpoint.downstream_offset)

    feed = InternalTopicFeed(_consumer(bootstrap), "west", checkpoints_topic, restore)
    try:
        assert feed.read_to_end(threading.Event(), 30)
    finally:
        feed.close()
    assert feed.skipped == 2
    assert decider.last("billing", "h.orders", 0) is None
    assert decider.last("billing", "h.orders", 1) is not None
