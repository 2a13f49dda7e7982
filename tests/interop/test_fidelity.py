"""The data path copies records exactly: key, value, every header in order, timestamp, order, partition.

Also fan-out (one source, two targets). Timestamps: a CreateTime source keeps its type and value. A
LogAppendTime source's remote topic is CreateTime with the same value, as in MM2 (which never copies
`message.timestamp.type`: it is in config.properties.exclude), so the broker's append time survives.
librdkafka cannot produce a CreateTime of exactly 0 (it means "now"), so the earliest checked is 1 ms.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Producer

from tests.interop.support import create_topic, read_all, running_driver, tag, total_records, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.integration]

PARTITIONS = 3
# Recent: a segment whose newest record is older than retention.ms may be deleted during the test.
NOW_MS = int(time.time() * 1000)
HEADER_SETS: list[list[tuple[str, str | bytes | None]] | None] = [
    None,
    [("trace", b"a"), ("trace", b"b"), ("span", b"1"), ("trace", b"c")],  # duplicate keys, in order
    [("empty", None), ("blank", b"")],
    [("bin", bytes(range(256))), ("utf8", "ÿ€🙂".encode())],
]
KEYS: list[bytes | None] = [None, b"", bytes(range(256)), b"k"]
VALUES: list[bytes | None] = [None, b"", os.urandom(10_240), b"v"]
TIMESTAMPS = [1, 86_400_000, 946_684_800_000, NOW_MS]  # 1 ms after the epoch, far past, recent


def produce_varied(bootstrap: str, topic: str) -> int:
    """Every combination of key, value, headers and timestamp kind, on every partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    count = 0
    for partition in range(PARTITIONS):
        for i, headers in enumerate(HEADER_SETS):
            for j, key in enumerate(KEYS):
                value = VALUES[(i + j) % len(VALUES)]
                producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                                 timestamp=TIMESTAMPS[(i + j + partition) % len(TIMESTAMPS)])
                count += 1
    assert producer.flush(30) == 0
    return count


def record(message) -> tuple:
    return message.key(), message.value(), message.headers(), message.timestamp()[1]


def assert_equal_partitions(source: str, target: str, topic: str, remote: str,
                            remote_type: int = TIMESTAMP_CREATE_TIME) -> None:
    for partition in range(PARTITIONS):
        originals = read_all(source, topic, partition)
        copies = read_all(target, remote, partition)
        assert [record(m) for m in copies] == [record(m) for m in originals], f"partition {partition}"
        assert {m.timestamp()[0] for m in copies} == {remote_type}


def test_remote_partition_equals_source_partition(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    suffix = tag()
    created, appended = f"fidelity-{suffix}", f"fidelity-lat-{suffix}"
    create_topic(east, created, PARTITIONS)
    create_topic(east, appended, PARTITIONS, {"message.timestamp.type": "LogAppendTime"})
    count = produce_varied(east, created)
    assert produce_varied(east, appended) == count
    assert {m.timestamp()[0] for m in read_all(east, appended, 0)} == {TIMESTAMP_LOG_APPEND_TIME}

    settings = {"topics": f"fidelity-.*{suffix}", "emit.checkpoints.enabled": "false"}
    with running_driver(tmp_path, {"east": east, "west": west}, [("east", "west")], settings) as driver:
        for topic in (created, appended):
            def copied(t: str = topic) -> bool:
                return total_records(west, f"east.{t}", PARTITIONS) == count
            wait_until(copied, 60, f"{count} records of east.{topic}")
        driver.assert_running()
    assert_equal_partitions(east, west, created, f"east.{created}")
    assert_equal_partitions(east, west, appended, f"east.{appended}")


def test_fan_out_one_source_two_targets(kafka_clusters: dict[str, str], north: str, tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"fanout-{tag()}"
    create_topic(east, topic, PARTITIONS)
    count = produce_varied(east, topic)
    bootstraps = {"east": east, "west": west, "north": north}
    settings = {"topics": topic, "emit.checkpoints.enabled": "false"}
    with running_driver(tmp_path, bootstraps, [("east", "west"), ("east", "north")], settings) as driver:
        for target in (west, north):
            def copied(t: str = target) -> bool:
                return total_records(t, f"east.{topic}", PARTITIONS) == count
            wait_until(copied, 60, f"{count} records of east.{topic} on {target}")
        driver.assert_running()
    assert_equal_partitions(east, west, topic, f"east.{topic}")
    assert_equal_partitions(east, north, topic, f"east.{topic}")
