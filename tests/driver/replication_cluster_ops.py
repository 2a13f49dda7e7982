"""Cluster operations shared by the replication tests: create, produce, read to the end, wait."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def admin(bootstrap: str) -> AdminClient:
    """A new admin client, to hold while its futures are pending. Not cached: a cached one outlived its
    test's clusters and reconnected to them, writing to the test process's stderr, until the session
    ended (where other tests read that stderr)."""
    return AdminClient({"bootstrap.servers": bootstrap})


def eventually(check: Callable[[], T | None], what: str, timeout_s: float = 90.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.25)


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)
    client.create_topics([NewTopic(name, partitions, 1, config=configs or {})])[name].result(30)


def produce(bootstrap: str, topic: str, count: int, tag: str = "v",
            partitions: list[int] | None = None) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [f"{tag}-{topic}-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        if partitions is None:
            producer.produce(topic, value, key=value)
        else:
            producer.produce(topic, value, key=value, partition=partitions[i % len(partitions)])
    assert producer.flush(30) == 0
    return values


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    client = admin(bootstrap)
    return client.describe_configs([resource])[resource].result(30)[name].value


def high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """A new topic's partitions may have no leader yet for a moment: asked again until they do."""
    def ask() -> list[int]:
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]]
        except KafkaException:
            return []
    return eventually(ask, f"the high watermark of {topic}[{partition}]")[0]


def partition_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, read by a consumer that joins no group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        return {p: high_watermark(consumer, topic, p) for p in range(partitions)}
    finally:
        consumer.close()


def read_topic(bootstrap: str, topic: str, expected: int | None, timeout_s: float = 90.0) -> list[Record]:
    """Committed records of every partition, read until each partition was once at its end (and until
    `expected` records arrived): a topic still being written is read up to about when this began."""
    metadata = eventually(lambda: admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions,
                          f"topic {topic}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    # A partition is read once at its end, or once past the high watermark it had when this began: a
    # read_committed consumer is told "end" only by a fetch that brings that partition nothing, which
    # never happens while one transaction after another commits to all the partitions together.
    began_at = {p: high_watermark(consumer, topic, p) for p in metadata}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata])
        at_end: set[int] = set()
        while len(at_end) < len(metadata) or (expected is not None and len(records) < expected):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: {len(records)} records after {timeout_s:.0f} s, "
                                     f"expected {expected}")
            for message in consumer.consume(1000, timeout=0.5):
                error, partition, offset = message.error(), message.partition(), message.offset()
                if error is None:
                    assert partition is not None and offset is not None  # a record has both
                    records.append(Record(partition, offset, message.key(), message.value()))
                    if offset + 1 >= began_at[partition]:
                        at_end.add(partition)
                elif error.code() == KafkaError._PARTITION_EOF:
                    assert partition is not None  # the event names its partition
                    at_end.add(partition)
    finally:
        consumer.close()
    return records


def copied_values(bootstrap: str, topic: str, sent: list[bytes], timeout_s: float = 120.0
                  ) -> Counter[bytes | None]:
    """Every value in the remote topic, read again until each sent value is there or the time is up.

    One read is not enough: it stops at the high watermarks it began with, and at least once the
    duplicates after a kill -9 or a hand-over make up the count, while the worker that took tasks over
    last may still be copying the tail the producer wrote just before it stopped. A value still
    missing at the end is lost."""
    deadline, wanted = time.monotonic() + timeout_s, set(sent)
    while True:
        copied = Counter(r.value for r in read_topic(bootstrap, topic, len(sent), timeout_s=timeout_s))
        if wanted <= copied.keys() or time.monotonic() > deadline:
            return copied
        time.sleep(1.0)


def remote_values(bootstrap: str, topic: str, expected: int) -> list[bytes | None]:
    return sorted((r.value for r in read_topic(bootstrap, topic, expected)), key=lambda v: v or b"")


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Java's default partitioner for a keyed record: murmur2 (seed 0x9747b28c), positive, modulo."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    h = (0x9747B28C ^ len(key)) & mask
    whole = len(key) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = key[whole:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions
