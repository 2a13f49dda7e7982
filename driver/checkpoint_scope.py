"""What the checkpoint task of one replication covers and how often: settings and topic scope.

Pure rules, used by `driver.checkpoint_worker`; names follow MM2 (`emit.checkpoints.*`,
`sync.group.offsets.*`, `offset-syncs.topic.location`).
"""

from __future__ import annotations

import logging
from collections.abc import Set
from dataclasses import dataclass

from contract.config import SrmConfig
from contract.replication_policy import ReplicationPolicy
from driver.checkpoint_rules import downstream_topic_for
from driver.offset_sync_store import OffsetSyncStore
from driver.topic_filter import TopicFilter, should_replicate_topic

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointSettings:
    emit_enabled: bool
    emit_interval_s: float
    sync_enabled: bool
    sync_interval_s: float
    metrics_period_s: float
    history_size: int = 0  # offset-syncs.history.size: dense recent syncs per partition
    spacing: int = 101  # offset.lag.max + 1 of this replication: how far apart kept syncs may be
    reverse_spacing: int = 101  # the same for the reverse replication's syncs (fail-back)

    @classmethod
    def of(cls, config: SrmConfig, source: str, target: str) -> CheckpointSettings:
        def count(key: str, of: tuple[str, str] = (source, target)) -> int:
            value = config.setting(key, *of)
            if value is None or value < 0:
                raise config.config_error(key, f"must be >= 0, got {value}", *of)
            return value

        config.offset_syncs_location(source, target)  # a bad location fails at start, not at first use
        return cls(
            emit_enabled=config.setting("emit.checkpoints.enabled", source, target),
            emit_interval_s=config.setting("emit.checkpoints.interval.seconds", source, target),
            sync_enabled=config.setting("sync.group.offsets.enabled", source, target),
            sync_interval_s=config.setting("sync.group.offsets.interval.seconds", source, target),
            metrics_period_s=config.setting("metrics.period", source, target),
            history_size=count("offset-syncs.history.size"),
            spacing=count("offset.lag.max") + 1,
            reverse_spacing=count("offset.lag.max", (target, source)) + 1)

    def sync_store(self, initialization_must_read_to_end: bool, reverse: bool = False) -> OffsetSyncStore:
        """A store for this replication's offset syncs (or, with `reverse`, the reverse one's)."""
        return OffsetSyncStore(initialization_must_read_to_end, self.history_size,
                               self.reverse_spacing if reverse else self.spacing)


def checkpointable_topic(topic: str, topic_filter: TopicFilter, policy: ReplicationPolicy, source: str,
                         target: str, allow: Set[str] = frozenset(), deny: Set[str] = frozenset()) -> bool:
    """Whether a group's offsets on `topic` (on the source) are checkpointed to `target`.

    The topics this replication copies (filter, policy and the live srm-control topic lists), plus
    fail-back topics: a single-hop remote topic that came from the target (`target.t`) and that the
    filter or the allow list accepts and the deny list does not name.
    """
    if should_replicate_topic(topic, topic_filter, policy, target, allow=allow, deny=deny):
        return True
    if not is_failback_topic(policy, source, target, topic) or policy.is_internal_topic(topic):
        return False
    # Asked without the cycle check, which is what excludes a fail-back topic from the data path.
    return should_replicate_topic(topic, topic_filter, _NoCycles(policy), target, allow=allow, deny=deny)


def is_failback_topic(policy: ReplicationPolicy, source: str, target: str, topic: str) -> bool:
    """`target.t` on the source, whose checkpoint names `t`: translated through the reverse syncs.

    Multi-hop names (`target.other.t`) are left out: their checkpoint would name the original topic,
    whose offsets are not the ones the reverse syncs describe.
    """
    if policy.topic_source(topic) != target:
        return False
    return downstream_topic_for(policy, source, target, topic) == policy.upstream_topic(topic)



class _NoCycles(ReplicationPolicy):
    """`policy` with every topic seen as local, so `is_cycle` never holds; other answers unchanged."""

    def __init__(self, policy: ReplicationPolicy) -> None:
        self._policy = policy

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return self._policy.format_remote_topic(source_alias, topic)

    def topic_source(self, topic: str) -> str | None:
        return None

    def upstream_topic(self, topic: str) -> str | None:
        return None

    def is_internal_topic(self, topic: str) -> bool:
        return self._policy.is_internal_topic(topic)

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self._policy.is_heartbeats_topic(topic)
