"""MM2's ``tasks.max``: a replication's work is split into tasks, each a fixed set of source partitions.

Which task copies a partition is a function of the partition alone (`task_of`): the topic's CRC-32
plus the partition number, modulo ``tasks.max``. Partitions added to a source topic get the next task
numbers round-robin, and every existing partition keeps its task, so growing a topic never moves
existing partitions between tasks (nor between transactional ids in exactly-once mode).

Workers share tasks through Kafka's group protocol. Each replication has a coordination topic in the
source cluster (`contract.replication_policy.tasks_topic`) with one partition per task; it holds no
records. Every worker serving the replication subscribes to it in the consumer group
``srm-driver.<source>-<target>`` with cooperative-sticky assignment, and owning partition i of it means
owning task i. The source partitions themselves are assigned by hand to a second consumer that never
joins a group, so a task's partitions always move together, and a dead worker's tasks move whole to the
survivors, who resume from the progress topic.

The group's callbacks only note which tasks arrived; the copy loop starts them (with exactly-once, the
task's ``init_transactions``) outside any callback. A revoked task is released inside its callback,
before the group hands it to another worker, as a revoked partition was before.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, TopicPartition

from driver.send_queue import PartitionKey

LOG = logging.getLogger(__name__)

TASKS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


def task_of(topic: str, partition: int, tasks_max: int) -> int:
    """The task copying ``topic[partition]``: stable as partitions are added to the topic."""
    return (zlib.crc32(topic.encode()) + partition) % tasks_max


def task_partitions(topics: dict[str, int], tasks: Iterable[int], tasks_max: int) -> set[PartitionKey]:
    """The source partitions of ``tasks``, given topic -> partition count."""
    wanted = set(tasks)
    return {(topic, partition) for topic, count in topics.items() for partition in range(count)
            if task_of(topic, partition, tasks_max) in wanted}


class TaskCoordinator:
    """This worker's tasks: the partitions of the coordination topic the group assigned to it."""

    def __init__(self, consumer: Consumer, topic: str, tasks_max: int,
                 release: Callable[[set[int], bool], None]) -> None:
        self.consumer, self.topic, self.tasks_max, self._release = consumer, topic, tasks_max, release
        self.owned: set[int] = set()  # started by the copy loop
        self._arrived: set[int] = set()  # assigned by the group, not started yet
        consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    def poll(self) -> set[int]:
        """Serves the group protocol (its callbacks run here); the tasks that arrived, now owned."""
        self.consumer.poll(0)
        arrived, self._arrived = self._arrived, set()
        self.owned |= arrived
        return arrived

    def close(self) -> None:
        self.consumer.close()  # leaves the group: the other workers take the tasks over at once

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)  # nothing to read: the topic only coordinates
        # A coordination topic grown past tasks.max by hand: those tasks have no source partition.
        self._arrived |= {tp.partition for tp in partitions if tp.partition < self.tasks_max}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._leave(consumer, partitions, lost=False)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._leave(consumer, partitions, lost=True)

    def _leave(self, consumer: Consumer, partitions: list[TopicPartition], lost: bool) -> None:
        tasks = {tp.partition for tp in partitions}
        started = tasks & self.owned
        self._arrived -= tasks
        self.owned -= tasks
        if started:
            self._release(started, lost)
        if partitions:
            consumer.incremental_unassign(partitions)
