"""Decisions of the checkpoint task: topic renaming, monotonic checkpoints and
automatic group offset sync (MM2 compatible).

Used by the checkpoint task; the replication policy comes from `contract.replication_policy`
and is only duck-typed here, so this module stays a dependency-free leaf.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

LOG = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# Group states (Kafka GroupState names) in which no member can be overridden:
# EMPTY has no members; DEAD is what classic coordinators report for a group
# that does not exist. UNKNOWN is deliberately absent: clients report states they
# cannot parse (e.g. KIP-848 ASSIGNING/RECONCILING) as UNKNOWN, and such a group
# may well be consuming.
SYNCABLE_GROUP_STATES: Final = frozenset({"EMPTY", "DEAD"})


class TopicNaming(Protocol):
    """The part of a replication policy the checkpoint rules need."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str: ...

    def topic_source(self, topic: str) -> str | None: ...

    def upstream_topic(self, topic: str) -> str | None: ...


def original_topic(policy: TopicNaming, topic: str) -> str:
    """Strip every replication hop from a topic name (MM2 originalTopic).

    A policy with its own `original_topic` is the authority on its names and is
    asked directly; otherwise MM2's interface default is applied.
    """
    own = getattr(policy, "original_topic", None)
    if callable(own):
        return own(topic)
    seen = {topic}
    while True:
        upstream = policy.upstream_topic(topic)
        # An identity-style policy returns the name unchanged: nothing to strip.
        if upstream is None or upstream == topic:
            return topic
        if upstream in seen:
            raise ValueError(f"replication policy loops on topic {topic!r}")
        seen.add(upstream)
        topic = upstream


def downstream_topic_for(
    policy: TopicNaming, source_alias: str, target_alias: str, upstream_topic: str
) -> str:
    """Topic on the target that a checkpoint for `upstream_topic` refers to.

    A topic that came from the target itself (``B.t`` on A, replicating A->B) is
    checkpointed under its original name ``t`` on B: the fail-back case.
    """
    if policy.topic_source(upstream_topic) == target_alias:
        return original_topic(policy, upstream_topic)
    return policy.format_remote_topic(source_alias, upstream_topic)


@dataclass(frozen=True, slots=True)
class CheckpointPosition:
    """Offsets carried by one checkpoint record."""

    upstream_offset: int
    downstream_offset: int


def checkpoint_is_newer(previous: CheckpointPosition | None, candidate: CheckpointPosition) -> bool:
    """Whether `candidate` should be emitted after `previous` (MM2 compatible).

    Translation of a fixed upstream offset can move backwards as the sync history
    changes, so checkpoints only advance downstream; an upstream rewind is the
    one deliberate way back, because the group itself went back.
    """
    if candidate.downstream_offset < 0:
        return False
    if previous is None:
        return True
    if candidate.upstream_offset < previous.upstream_offset:
        return True
    return candidate.downstream_offset > previous.downstream_offset


class CheckpointDecider:
    """Remembers the last checkpoint per (group, downstream topic, partition)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str, int], CheckpointPosition] = {}

    def last(self, group: str, topic: str, partition: int) -> CheckpointPosition | None:
        """The last emitted or restored checkpoint, None when there is none."""
        return self._last.get((group, topic, partition))

    def restore(self, group: str, topic: str, partition: int, upstream: int, downstream: int) -> None:
        """Load a checkpoint read back from the checkpoints topic at start."""
        self._last[(group, topic, partition)] = CheckpointPosition(upstream, downstream)

    def offer(self, group: str, topic: str, partition: int, upstream: int, downstream: int) -> bool:
        """True (and remembered) when this checkpoint should be emitted.

        `topic` is the downstream topic, as in the checkpoint record key.
        """
        key = (group, topic, partition)
        candidate = CheckpointPosition(upstream, downstream)
        if not checkpoint_is_newer(self._last.get(key), candidate):
            return False
        self._last[key] = candidate
        return True

    def checkpoints_of(self, group: str) -> dict[TopicPartition, CheckpointPosition]:
        """Latest checkpoint per downstream partition of one group."""
        return {
            (topic, partition): position
            for (owner, topic, partition), position in self._last.items()
            if owner == group
        }


def normalized_group_state(state: str | None) -> str | None:
    """Upper-case Kafka group state name; accepts 'Empty', 'EMPTY' or 'X.EMPTY'."""
    if state is None:
        return None
    return state.rpartition(".")[2].strip().upper()


def offsets_to_sync(
    target_group_state: str | None,
    current: Mapping[TopicPartition, int],
    translated: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Offsets to commit for a group on the target, never overriding live members.

    `target_group_state` is None when the group does not exist on the target.
    `current` holds the group's committed target offsets (missing or negative:
    none), `translated` the latest checkpointed downstream offsets. A partition is
    written only when it moves forward.
    """
    state = normalized_group_state(target_group_state)
    if state is not None and state not in SYNCABLE_GROUP_STATES:
        LOG.debug("not syncing offsets of a group in state %s", state)
        return {}
    return {
        partition: offset
        for partition, offset in translated.items()
        if offset >= 0 and current.get(partition, -1) < offset
    }
