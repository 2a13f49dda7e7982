"""Automatic group offset sync (`sync.group.offsets.enabled`): checkpointed offsets committed to the
target's consumer groups through the Admin API, so failover only needs consumers redirected.

Safety comes from two checks, both MM2 compatible in effect: the group's state is read right before
altering and only EMPTY or absent groups are written (`offsets_to_sync`), and a partition is only
written forward. A group that turns active between the check and the write is refused by the broker
itself (UNKNOWN_MEMBER_ID), which is logged and left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from clients import kafka_clients
from driver.checkpoint_rules import offsets_to_sync

LOG = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0
PartitionKey = tuple[str, int]


class GroupOffsetSync:
    """Writes translated offsets into the consumer groups of one target cluster."""

    def __init__(self, admin: AdminClient, alias: str) -> None:
        self.admin, self.alias = admin, alias

    def sync(self, group: str, translated: Mapping[PartitionKey, int]) -> dict[PartitionKey, int]:
        """Commit the translated offsets a group may take; returns what the target accepted."""
        if not translated:
            return {}
        current = self.committed(group)
        # Read last: the state decides, and the later it is read the smaller the window it can go stale.
        state = self.group_state(group)
        planned = offsets_to_sync(state, current, translated)
        if not planned:
            LOG.debug("group %s on %s (state %s): nothing to sync", group, self.alias, state)
            return {}
        return self._alter(group, planned)

    def committed(self, group: str) -> dict[PartitionKey, int]:
        """The group's committed offsets on the target (empty for an absent group)."""
        request = [ConsumerGroupTopicPartitions(group)]
        result = self.admin.list_consumer_group_offsets(request, request_timeout=ADMIN_TIMEOUT_S)
        listed = kafka_clients.await_result(self.admin, result[group])
        return {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or []
                if tp.error is None and tp.offset >= 0}

    def group_state(self, group: str) -> str | None:
        """Kafka group state name (e.g. EMPTY, STABLE), None when the group does not exist."""
        try:
            description = kafka_clients.await_result(self.admin, self.admin.describe_consumer_groups(
                [group], request_timeout=ADMIN_TIMEOUT_S)[group])
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return None
            raise
        return str(description.state)

    def _alter(self, group: str, planned: Mapping[PartitionKey, int]) -> dict[PartitionKey, int]:
        partitions = [TopicPartition(topic, partition, offset)
                      for (topic, partition), offset in sorted(planned.items())]
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        try:
            answer = kafka_clients.await_result(self.admin, self.admin.alter_consumer_group_offsets(
                request, request_timeout=ADMIN_TIMEOUT_S)[group])
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS):
                LOG.info("group %s on %s became active; offsets not synced", group, self.alias)
                return {}
            raise
        written: dict[PartitionKey, int] = {}
        for tp in answer.topic_partitions or []:
            if tp.error is None:
                written[(tp.topic, tp.partition)] = tp.offset
            elif tp.error.code() == KafkaError.UNKNOWN_MEMBER_ID:
                LOG.info("group %s on %s became active; %s-%d not synced", group, self.alias,
                         tp.topic, tp.partition)
            else:
                LOG.warning("group %s on %s: cannot sync %s-%d to %d: %s", group, self.alias,
                            tp.topic, tp.partition, planned[(tp.topic, tp.partition)], tp.error.str())
        if written:
            LOG.info("synced %d offsets of group %s on %s", len(written), group, self.alias)
        return written
