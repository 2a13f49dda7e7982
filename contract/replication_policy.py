"""Replication policies and every topic name the project uses.

This module is the single owner of topic names: remote topics and MM2's internal topics through a
``ReplicationPolicy`` (MM2 compatible), and the topics of our own (metrics, control) as functions.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Final

LOG = logging.getLogger(__name__)

HEARTBEATS_TOPIC: Final[str] = "heartbeats"
CONTROL_TOPIC: Final[str] = "srm-control.internal"
"""Compacted topic in each target cluster holding the srm-control allow/deny lists."""

DEFAULT_SEPARATOR: Final[str] = "."
_OFFSET_SYNCS_PREFIX: Final[str] = "mm2-offset-syncs"

_DEFAULT_CLASS_NAMES: Final = frozenset(
    {"org.apache.kafka.connect.mirror.DefaultReplicationPolicy", "DefaultReplicationPolicy"}
)
_IDENTITY_CLASS_NAMES: Final = frozenset(
    {"org.apache.kafka.connect.mirror.IdentityReplicationPolicy", "IdentityReplicationPolicy"}
)


def metrics_topic(source_alias: str) -> str:
    """Raw metrics of the replications from ``source_alias``, in the target cluster (SRM convention)."""
    return f"srm-metrics.{source_alias}.internal"


def metrics_topic_pattern() -> str:
    """Regex (Java and Python syntax) matching every raw metrics topic, for pattern subscriptions."""
    return r"srm-metrics\..+\.internal"


METRICS_TOPIC_SOURCE: Final[str] = r"^srm-metrics\.(?P<source>.+)\.internal$"
"""Regex taking the source alias out of a raw metrics topic's name (group ``source``)."""


def progress_topic(source_alias: str) -> str:
    """Replication progress (committed source offsets), in the target; MM2 dedicated-mode name."""
    return f"mm2-offsets.{source_alias}.internal"


def tasks_topic(target_alias: str, tasks_max: int) -> str:
    """The driver's task coordination topic of the replications into ``target_alias`` with ``tasks_max``
    tasks, in the SOURCE cluster: one empty partition per task; the group member assigned partition i
    owns task i. A new ``tasks.max`` is a new topic (partitions cannot be taken away from a topic)."""
    return f"srm-driver-tasks-{tasks_max}.{target_alias}.internal"


def configs_topic(source_alias: str) -> str:
    """Task configuration of the replications from ``source_alias``, in the target; MM2 name."""
    return f"mm2-configs.{source_alias}.internal"


def status_topic(source_alias: str) -> str:
    """Task status of the replications from ``source_alias``, in the target; MM2 name."""
    return f"mm2-status.{source_alias}.internal"


class ReplicationPolicy(ABC):
    """How remote topics are named and recognised; MM2 compatible (``ReplicationPolicy`` interface)."""

    @abstractmethod
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """Name in the target cluster of ``topic`` replicated from ``source_alias``."""

    @abstractmethod
    def topic_source(self, topic: str) -> str | None:
        """Alias of the cluster ``topic`` was replicated from, or None for a local topic."""

    @abstractmethod
    def upstream_topic(self, topic: str) -> str | None:
        """Name of ``topic`` one hop upstream, or None for a local topic."""

    def original_topic(self, topic: str) -> str:
        """Name of ``topic`` in the cluster where it was first produced."""
        current = topic
        while True:
            upstream = self.upstream_topic(current)
            # The equality guard stops policies that keep names unchanged (Identity) from looping.
            if upstream is None or upstream == current:
                return current
            current = upstream

    def heartbeats_topic(self) -> str:
        return HEARTBEATS_TOPIC

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"{_OFFSET_SYNCS_PREFIX}.{cluster_alias}.internal"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        """True for ``heartbeats`` and its remote copies such as ``A.heartbeats`` or ``B.A.heartbeats``."""
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(".internal")

    def is_internal_topic(self, topic: str) -> bool:
        """MM2 internal, Kafka internal (``__``/``.`` prefix) or Connect-style (``-internal``) topics."""
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith(("__", "."))
            or topic.endswith(("-internal", ".internal"))
        )


def _java_split(text: str, separator: str) -> list[str]:
    """``String.split`` of Java with a quoted literal: trailing empty parts are dropped.

    ``"a.."`` gives ``["a"]`` (so no source) where Python's split would give ``["a", "", ""]``.
    """
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class DefaultReplicationPolicy(ReplicationPolicy):
    """Remote topics are ``<source><separator><topic>``; MM2 compatible, Java split quirk included."""

    def __init__(self, separator: str = DEFAULT_SEPARATOR, internal_topic_separator_enabled: bool = True):
        if not separator:
            raise ValueError("replication.policy.separator must not be empty")
        self.separator = separator
        # KIP-949: internal topics may keep "." whatever the separator, for clusters named before KIP-690.
        self.internal_separator = separator if internal_topic_separator_enabled else DEFAULT_SEPARATOR

    def __repr__(self) -> str:
        return f"{type(self).__name__}(separator={self.separator!r})"

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = _java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator) :]

    def _internal_suffix(self) -> str:
        return f"{self.internal_separator}internal"

    def _checkpoints_suffix(self) -> str:
        return f"{self.internal_separator}checkpoints{self._internal_suffix()}"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        return f"{_OFFSET_SYNCS_PREFIX}{self.internal_separator}{cluster_alias}{self._internal_suffix()}"

    def checkpoints_topic(self, cluster_alias: str) -> str:
        return f"{cluster_alias}{self._checkpoints_suffix()}"

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._checkpoints_suffix())

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix())


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Remote topics keep their name (MM2 compatible, prefixless replication).

    Topics that look like heartbeats are still prefixed, so hop discovery keeps working. This policy
    cannot detect cycles: every non-heartbeats topic appears to come from ``source_cluster_alias``.
    """

    def __init__(
        self,
        source_cluster_alias: str | None = None,
        separator: str = DEFAULT_SEPARATOR,
        internal_topic_separator_enabled: bool = True,
    ):
        super().__init__(separator, internal_topic_separator_enabled)
        self.source_cluster_alias = source_cluster_alias

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source_cluster_alias={self.source_cluster_alias!r})"

    def _looks_like_heartbeats(self, topic: str) -> bool:
        return topic.endswith(self.heartbeats_topic())

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeats(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return super().topic_source(topic)
        return self.source_cluster_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return super().upstream_topic(topic)
        return topic

    def original_topic(self, topic: str) -> str:
        if self._looks_like_heartbeats(topic):
            return super().original_topic(topic)
        return topic


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when ``topic`` already passed through ``target_alias``, so replicating it there would loop.

    MM2 compatible: walks the upstream chain (``B.A.t`` -> ``A.t`` -> ``t``) looking for the target.
    """
    current = topic
    while True:
        source = policy.topic_source(current)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(current)
        if upstream is None or upstream == current:
            return False
        current = upstream


def policy_from_config(
    class_name: str | None,
    separator: str = DEFAULT_SEPARATOR,
    source_alias: str | None = None,
    internal_topic_separator_enabled: bool = True,
) -> ReplicationPolicy:
    """The policy named by ``replication.policy.class`` (MM2 class name or short name; None = default)."""
    name = (class_name or "").strip()
    if not name or name in _DEFAULT_CLASS_NAMES:
        return DefaultReplicationPolicy(separator, internal_topic_separator_enabled)
    if name in _IDENTITY_CLASS_NAMES:
        return IdentityReplicationPolicy(source_alias, separator, internal_topic_separator_enabled)
    known = ", ".join(sorted(_DEFAULT_CLASS_NAMES | _IDENTITY_CLASS_NAMES))
    raise ValueError(f"unknown replication policy class {name!r}; expected one of: {known}")
