"""The one place that builds confluent-kafka clients from the SRM config and creates topics.

Byte-array clients only (MM2 compatible: records are copied as opaque bytes). librdkafka errors from
topic creation are turned into one exception type naming the cluster and topic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from driver.config import SrmConfig

LOG = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0


class ClusterUnavailable(RuntimeError):
    """A cluster did not answer, or refused an administrative request."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    replication_factor: int = -1  # -1: the broker's default.replication.factor (KIP-464)


def admin(config: SrmConfig, alias: str) -> AdminClient:
    return AdminClient(config.kafka_client_config(alias, role="admin"))


def producer(config: SrmConfig, alias: str, overrides: dict[str, object] | None = None,
             source: str | None = None, target: str | None = None) -> Producer:
    settings: dict[str, object] = {"linger.ms": 20, "compression.type": "lz4",
                                   "enable.idempotence": True, "acks": "all"}
    settings.update(config.kafka_client_config(alias, role="producer", source=source, target=target))
    settings.update(overrides or {})
    return Producer(settings)


def consumer(config: SrmConfig, alias: str, group_id: str, overrides: dict[str, object] | None = None,
             source: str | None = None, target: str | None = None) -> Consumer:
    settings: dict[str, object] = {"group.id": group_id, "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    settings.update(config.kafka_client_config(alias, role="consumer", source=source, target=target))
    settings.update(overrides or {})
    return Consumer(settings)


def partition_counts(client: AdminClient, alias: str) -> dict[str, int]:
    """Topic -> partition count of every topic in the cluster."""
    try:
        metadata = client.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterUnavailable(f"cluster {alias!r} did not answer a metadata request: {exc}") from exc
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def ensure_topics(client: AdminClient, alias: str, specs: list[TopicSpec]) -> None:
    """Create the topics that do not exist yet; existing ones are left as they are."""
    if not specs:
        return
    new = [NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor,
                    config=s.configs) for s in specs]
    for name, future in client.create_topics(new, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            future.result()
            LOG.info("created topic %s on %s", name, alias)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ClusterUnavailable(f"cannot create topic {name!r} on {alias!r}: {exc}") from exc
