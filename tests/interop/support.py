"""Shared pieces of the interop tests: the driver as a child process, and plain Kafka reads and writes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from stack import srm_properties
from stack.processes import ManagedProcess

# Short intervals, so a test sees several rounds of everything within seconds.
FAST: Mapping[str, object] = {
    "refresh.topics.interval.seconds": 2, "refresh.groups.interval.seconds": 2,
    "emit.checkpoints.interval.seconds": 2, "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": 2, "metrics.period": 1, "emit.heartbeats.interval.seconds": 1,
}
OFFSET_LAG_MAX = 100
T = TypeVar("T")


def wait_until(condition: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """The first truthy answer of `condition` (polled every 0.3 s); fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def tag() -> str:
    return uuid.uuid4().hex[:8]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)  # held until the answer: a collected client cancels its requests
    client.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result()


def produce_values(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """Values `p<partition>-<nnnn>`, written in order, so a value names its upstream offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"p{partition}-{i:04d}".encode(), partition=partition)
    assert producer.flush(30) == 0


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{tag()}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def total_records(bootstrap: str, topic: str, partitions: int) -> int:
    try:
        return sum(end_offsets(bootstrap, topic, partitions).values())
    except Exception:  # the remote topic does not exist yet
        return 0


def alter_group_offsets(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """Commits as an idle application would (the group has no members); retried while the group
    coordinator is still loading (NOT_COORDINATOR comes back per partition, not as an exception)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in offsets.items()])
    client = admin(bootstrap)

    def altered() -> bool:
        answers = [f.result() for f in client.alter_consumer_group_offsets([request]).values()]
        return all(tp.error is None for answer in answers for tp in answer.topic_partitions)

    wait_until(altered, 90, f"group {group} to accept its offsets")


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partition: int, isolation: str = "read_committed") -> list:
    """Every record of one partition, from the start to the end offset seen when called."""
    return read_partitions(bootstrap, topic, [partition], isolation)[partition]


def read_partitions(bootstrap: str, topic: str, partitions: Iterable[int],
                    isolation: str = "read_committed") -> dict[int, list]:
    """Every record of each partition, from the start to the end offsets seen when called, through one
    consumer: a consumer a partition made a read of a 25-partition topic on a loaded host outlast the wait
    it was polled in."""
    records: dict[int, list] = {p: [] for p in partitions}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{tag()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    try:
        ends = {p: end for p in records
                if (end := consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) > 0}
        if not ends:
            return records
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        left = set(ends)
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                error, partition, offset = message.error(), message.partition(), message.offset()
                if partition not in ends or offset is None or (error is not None and error.code() != -191):
                    continue  # a client-level event: librdkafka retries it
                if error is None:
                    records[partition].append(message)
                # _PARTITION_EOF (-191) names the offset it reached: past a transaction's marker too
                if offset >= ends[partition] - (1 if error is None else 0):
                    left.discard(partition)
        if left:
            raise AssertionError(f"could not read {topic}{sorted(left)} to offsets {ends}")
        return records
    finally:
        consumer.close()


def resume_group(bootstrap: str, group: str, topic: str,
                 expected_end: Mapping[int, int]) -> dict[int, list[str]]:
    """A failed-over application: joins `group` with auto.offset.reset=latest and reads to the end.

    With `latest`, a partition without a synced offset would be skipped entirely, so a missing
    translation fails the caller's comparison."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "latest"})
    consumer.subscribe([topic])
    values: dict[int, list[str]] = {p: [] for p in expected_end}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                partition, value = message.partition(), message.value()
                if message.error() is None:
                    assert partition is not None and value is not None  # every record here has both
                    values[partition].append(value.decode())
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [TopicPartition(topic, p) for p in expected_end])}
            if all(positions.get(p, -1) >= end for p, end in expected_end.items()):
                return values
        raise AssertionError(f"group {group} did not reach the end of {topic}: {values.keys()}")
    finally:
        consumer.close()


class Driver:
    """`srm-driver` as a child process, stopped with SIGTERM (a clean stop)."""

    def __init__(self, workdir: Path, bootstraps: Mapping[str, str], pairs: list[tuple[str, str]],
                 settings: Mapping[str, object], name: str = "driver",
                 targets: list[str] | None = None) -> None:
        """`targets`: the driver's target clusters when they are more than the enabled pairs' (a
        disabled pair into a target still sends heartbeats there)."""
        workdir.mkdir(parents=True, exist_ok=True)
        text = srm_properties.render(bootstraps, pairs, "redis://127.0.0.1:1/0", {**FAST, **settings})
        if targets is not None:
            lines = [line for line in text.splitlines() if not line.startswith("driver.target.clusters")]
            text = "\n".join([*lines, f"driver.target.clusters = {', '.join(targets)}"]) + "\n"
        self.config = workdir / f"{name}.properties"
        self.config.write_text(text)
        self.process = ManagedProcess.python_module(name, "driver", ["--config", str(self.config)], workdir)

    @property
    def log(self) -> str:
        return self.process.log_file.read_text(errors="replace")

    def start(self) -> Driver:
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop(60)

    def assert_running(self) -> None:
        assert self.process.running, f"the driver exited:\n{self.process.log_tail()}"


@contextmanager
def running_driver(workdir: Path, bootstraps: Mapping[str, str], pairs: list[tuple[str, str]],
                   settings: Mapping[str, object], name: str = "driver",
                   targets: list[str] | None = None) -> Iterator[Driver]:
    driver = Driver(workdir, bootstraps, pairs, settings, name, targets).start()
    try:
        yield driver
    except BaseException:
        print(f"--- {name} log tail ---\n{driver.process.log_tail(80)}")
        raise
    finally:
        driver.stop()
