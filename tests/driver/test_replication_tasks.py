"""MM2's tasks.max on real brokers: tasks move whole between workers, a task's zombie is fenced, and
exactly-once over many partitions needs one producer per task, not per partition.

The workers run in this process (`ReplicationWorker` threads), so what each holds is read directly.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from contract.config import SrmConfig, load_config
from driver.replication import ReplicationWorker, group_id
from driver.replication_tasks import task_of, task_partitions
from driver.transactional_writer import TransactionalWriter, transactional_id
from stack import srm_properties
from tests.driver.replication_cluster_ops import copied_values, create_topic, eventually, produce, read_topic

pytestmark = pytest.mark.integration

FAST = {"refresh.topics.interval.seconds": 2, "metrics.period": 2, "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false", "source.consumer.session.timeout.ms": 6000,
        "source.consumer.heartbeat.interval.ms": 1000}
PARTITION_LIST = re.compile(r"(\S+)\[(\d+)\]")


def write_config(tmp_path: Path, kafka_clusters: dict[str, str], extra: dict[str, object]) -> SrmConfig:
    path = srm_properties.write(tmp_path / "srm.properties", kafka_clusters, [("east", "west")],
                                "redis://127.0.0.1:1/0", {**FAST, **extra})
    return load_config(str(path))


class Worker:
    """One driver worker of east -> west, started and stopped on its own."""

    def __init__(self, config: SrmConfig, name: str) -> None:
        self.stopping = threading.Event()
        replication = next(r for r in config.replications() if r.enabled)
        self.thread = ReplicationWorker(config, replication, self.stopping)
        self.thread.name = name

    def held(self) -> set[tuple[str, int]]:
        writer = getattr(self.thread, "writer", None)
        while True:
            try:
                return set(writer.flows) if writer is not None else set()
            except RuntimeError:  # changed while copied: read again
                continue

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(60)


@contextmanager
def workers(config: SrmConfig, *names: str) -> Iterator[list[Worker]]:
    started = [Worker(config, name) for name in names]
    for worker in started:
        worker.thread.start()
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


class Assignments(logging.Handler):
    """The partitions each worker was assigned and released, one entry per log line of the worker."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[str, str, set[tuple[str, int]]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for verb in ("assigned", "released", "lost"):
            if f" {verb} " in message and "task(s)" not in message:
                keys = {(t, int(p)) for t, p in PARTITION_LIST.findall(message)}
                self.changes.append((record.threadName or "", verb, keys))


@pytest.fixture
def assignments() -> Iterator[Assignments]:
    handler, logger = Assignments(), logging.getLogger("driver.replication")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_four_tasks_over_twelve_partitions_move_whole(kafka_clusters: dict[str, str], tmp_path: Path,
                                                     assignments: Assignments) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"tasks-{uuid.uuid4().hex[:8]}"
    create_topic(east, topic, 12)
    config = write_config(tmp_path, kafka_clusters, {"topics": topic, "tasks.max": 4})
    topics = {topic: 12}
    everything = task_partitions(topics, range(4), 4)

    def whole_tasks(keys: set[tuple[str, int]]) -> bool:
        return keys == task_partitions(topics, {task_of(t, p, 4) for t, p in keys}, 4)

    with workers(config, "worker-a", "worker-b") as (a, b):
        eventually(lambda: a.held() and b.held() and a.held() | b.held() == everything,
                   "both workers holding tasks", timeout_s=120)
        assert not a.held() & b.held()
        assert whole_tasks(a.held()) and whole_tasks(b.held())
        first = produce(east, topic, 600, tag="first")
        assert {r.value for r in read_topic(west, f"east.{topic}", 600)} == set(first)
        a.stop()
        eventually(lambda: b.held() == everything, "worker-b holding every task", timeout_s=120)
        second = produce(east, topic, 600, tag="second")
        assert set(copied_values(west, f"east.{topic}", first + second)) == set(first) | set(second)
    # Every assignment and release of either worker took or gave whole tasks, never part of one.
    changes = [(who, verb, keys) for who, verb, keys in assignments.changes if who.startswith("worker-")]
    assert {who for who, _, _ in changes} == {"worker-a", "worker-b"}
    partial = [(who, verb, sorted(keys)) for who, verb, keys in changes if not whole_tasks(keys)]
    assert not partial, partial


def test_a_zombie_tasks_late_transaction_is_fenced(kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"zombie-{uuid.uuid4().hex[:8]}"
    remote = f"east.{topic}"
    create_topic(east, topic, 4)
    create_topic(west, remote, 4)
    sent = produce(east, topic, 400, tag="source")
    config = write_config(tmp_path, kafka_clusters, {"topics": topic, "tasks.max": 2, "exactly.once": "true"})
    task = task_of(topic, 0, 2)
    # A previous owner of the task, its transaction still open: it must be fenced and its records aborted.
    zombie = Producer({"bootstrap.servers": west, "transaction.timeout.ms": 300_000,
                       "transactional.id": transactional_id(group_id("east", "west"), task)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(remote, b"zombie-early", partition=0)
    assert zombie.flush(30) == 0
    with workers(config, "worker-eos"):
        copied = Counter(r.value for r in read_topic(west, remote, len(sent), timeout_s=120))
        with pytest.raises(KafkaException):  # fenced: the worker's init_transactions took its epoch
            zombie.produce(remote, b"zombie-late", partition=0)
            zombie.flush(10)
            zombie.commit_transaction(10)
        copied = Counter(r.value for r in read_topic(west, remote, len(sent), timeout_s=60))
    assert not {v for v in copied if v is not None and v.startswith(b"zombie")}
    assert set(copied) == set(sent)
    assert set(copied.values()) == {1}


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_two_hundred_partitions_exactly_once_with_one_producer_per_task(kafka_clusters: dict[str, str],
                                                                       tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"wide-{uuid.uuid4().hex[:8]}"
    create_topic(east, topic, 200)
    sent = produce(east, topic, 2000, tag="wide")
    config = write_config(tmp_path, kafka_clusters, {"topics": topic, "tasks.max": 4, "exactly.once": "true"})
    threads_before = native_threads()
    with workers(config, "worker-wide") as (worker,):
        copied = Counter(r.value for r in read_topic(west, f"east.{topic}", len(sent), timeout_s=180))
        assert set(copied) == set(sent) and set(copied.values()) == {1}
        assert worker.held() == task_partitions({topic: 200}, range(4), 4)
        writer = worker.thread.writer
        assert isinstance(writer, TransactionalWriter)
        assert sorted(writer.producers) == [0, 1, 2, 3]  # one per task, not 200
        # librdkafka threads of every client of the worker: a handful per client. One producer per
        # partition would add 200 producers, each with its own main and broker threads (>= 600).
        added = native_threads() - threads_before
        assert added <= 80, f"{added} threads for 200 partitions"
