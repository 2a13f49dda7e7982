"""The Kafka clients of one replication `source -> target`, built with its settings.

- the copy consumer (source): reads the partitions of the tasks this worker owns, assigned by hand;
- the coordination consumer (source): the worker's member of the replication's group, which hands out
  tasks (`driver.replication_tasks`) and reads nothing;
- the progress consumer (target): reads `mm2-offsets.<source>.internal`, committed records only;
- the metrics reader (target): reads the tail of `srm-metrics.<source>.internal` when tasks start
  (`driver.count_recovery`), assigned by hand;
- further producers of an at-least-once copy (target), where a target broker leads many of its
  partitions (`driver.copy_producers`);
- a task's transactional producer (target), in exactly-once mode.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, Producer

from clients import kafka_clients
from contract.config import Replication, SrmConfig
from driver.send_queue import QueueLimits
from driver.source_watch import SourceWatch
from driver.target_writer import AT_LEAST_ONCE_PRODUCER, TRANSACTION_TIMEOUT_S


def group_id(source: str, target: str) -> str:
    return f"srm-driver.{source}-{target}"


def copy_consumer(config: SrmConfig, replication: Replication, limits: QueueLimits,
                  source_watch: SourceWatch) -> Consumer:
    """Copies the partitions of the owned tasks, assigned by hand: it never joins a group."""
    source, target = replication.source, replication.target
    built: list[Consumer] = []

    def on_error(error: KafkaError) -> None:  # the outage watch, then the client's own fault watch
        source_watch.on_error(error)
        watch = kafka_clients.watch_of(built[0]) if built else None
        if watch is not None:
            watch.error_cb(error)

    built.append(kafka_clients.consumer(config, source, f"{group_id(source, target)}.copy", source=source,
                                        target=target, overrides={
                                            "fetch.wait.max.ms": 100, "error_cb": on_error,
                                            **limits.consumer_limits()}))
    return built[0]


def coordination_consumer(config: SrmConfig, replication: Replication) -> Consumer:
    """The worker's member of the replication's group: it is assigned tasks, reads nothing."""
    source, target = replication.source, replication.target
    return kafka_clients.consumer(config, source, group_id(source, target), source=source, target=target,
                                  overrides={"partition.assignment.strategy": "cooperative-sticky"})


def progress_consumer(config: SrmConfig, replication: Replication) -> Consumer:
    source, target = replication.source, replication.target
    return kafka_clients.consumer(config, target, f"{group_id(source, target)}.progress-reader",
                                  source=source, target=target, overrides={
                                      "enable.partition.eof": True, "isolation.level": "read_committed"})


def metrics_reader(config: SrmConfig, replication: Replication) -> Consumer:
    source, target = replication.source, replication.target
    return kafka_clients.consumer(config, target, f"{group_id(source, target)}.metrics-reader",
                                  source=source, target=target, overrides={"enable.partition.eof": False})


def copy_producer(config: SrmConfig, replication: Replication, limits: QueueLimits) -> Producer:
    """A further producer of an at-least-once copy (`driver.copy_producers`), set as the replication's own."""
    source, target = replication.source, replication.target
    return kafka_clients.producer(config, target, source=source, target=target,
                                  overrides={**AT_LEAST_ONCE_PRODUCER, **limits.producer_limits()})


def transactional_producer(config: SrmConfig, replication: Replication, limits: QueueLimits,
                           transactional_id: str) -> Producer:
    source, target = replication.source, replication.target
    return kafka_clients.producer(config, target, source=source, target=target, overrides={
        "transactional.id": transactional_id,
        "transaction.timeout.ms": int(TRANSACTION_TIMEOUT_S * 1000), **limits.producer_limits()})
