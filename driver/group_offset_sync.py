"""Automatic group offset sync (`sync.group.offsets.enabled`): checkpointed offsets committed to the
target's consumer groups through the Admin API, so failover only needs consumers redirected.

Safety comes from two checks, both MM2 compatible in effect: the group's state is read right before
altering and only EMPTY or absent groups are written (`offsets_to_sync`), and a partition is only
written forward. A group that turns active between the check and the write is refused by the broker
itself (UNKNOWN_MEMBER_ID), which is logged and left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from clients.kafka_clients import GroupAdmin
from driver.checkpoint_rules import offsets_to_sync

LOG = logging.getLogger(__name__)

PartitionKey = tuple[str, int]


class GroupOffsetSync:
    """Writes translated offsets into the consumer groups of one target cluster."""

    def __init__(self, groups: GroupAdmin) -> None:
        self.groups, self.alias = groups, groups.alias

    def sync(self, group: str, translated: Mapping[PartitionKey, int]) -> dict[PartitionKey, int]:
        """Commit the translated offsets a group may take; returns what the target accepted."""
        if not translated:
            return {}
        current = self.committed(group, translated)
        # Read last: the state decides, and the later it is read the smaller the window it can go stale.
        state = self.group_state(group)
        planned = offsets_to_sync(state, current, translated)
        if not planned:
            LOG.debug("group %s on %s (state %s): nothing to sync", group, self.alias, state)
            return {}
        return self._alter(group, planned)

    def committed(self, group: str, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
        """The group's committed offsets of ``partitions`` on the target (empty for an absent group)."""
        listed = self.groups.committed(group, [TopicPartition(t, p) for t, p in sorted(partitions)])
        return {(tp.topic, tp.partition): tp.offset for tp in listed if tp.error is None and tp.offset >= 0}

    def group_state(self, group: str) -> str | None:
        """Kafka group state name (e.g. EMPTY, STABLE), None when the group does not exist."""
        try:
            description = self.groups.describe(group)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return None
            raise
        return str(description.state)

    def _alter(self, group: str, planned: Mapping[PartitionKey, int]) -> dict[PartitionKey, int]:
        partitions = [TopicPartition(topic, partition, offset)
                      for (topic, partition), offset in sorted(planned.items())]
        try:
            answer = self.groups.alter(group, partitions)
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
