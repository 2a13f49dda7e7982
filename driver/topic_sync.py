"""Remote topics follow their source topics: created, grown, and their configs kept in sync.

MM2 compatible (MirrorSourceConnector): a remote topic is created with the source partition count and
the source's replicable configs, raised to the source count when the source grows (never shrunk), and
its configs re-synced on every refresh with DefaultConfigPropertyFilter's exclusions: read-only,
sensitive and static-broker entries never travel; entries at their default value are deleted on the
target (its own default applies) unless `use.defaults.from = source`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Set
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka.admin import AdminClient

from contract import kafka_clients
from contract.config import SrmConfig
from contract.kafka_clients import TopicConfigEntry, TopicSpec
from contract.replication_policy import ReplicationPolicy
from contract.settings import SETTINGS
from driver.topic_filter import TopicFilter, should_replicate_topic, topic_filter_for

LOG = logging.getLogger(__name__)

DEFAULT_CONFIG_PROPERTIES_EXCLUDE: Final = tuple(
    SETTINGS["config.properties.exclude"].default)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ConfigChanges:
    set_values: dict[str, str] = field(default_factory=dict)
    delete: frozenset[str] = frozenset()


def _replicable(entry: TopicConfigEntry, excluded: Set[str]) -> bool:
    return not (entry.read_only or entry.sensitive or entry.static_broker or entry.name in excluded
                or entry.value is None)


def creation_configs(entries: Iterable[TopicConfigEntry], excluded: Set[str]) -> dict[str, str]:
    """Configs a new remote topic is created with: the source's explicit, replicable settings."""
    return {e.name: e.value for e in entries  # type: ignore[misc]
            if _replicable(e, excluded) and not e.is_default}


def config_changes(entries: Iterable[TopicConfigEntry], excluded: Set[str],
                   use_source_defaults: bool = False) -> ConfigChanges:
    """The incremental alteration that makes a remote topic's configs follow its source's."""
    set_values: dict[str, str] = {}
    delete: set[str] = set()
    for entry in entries:
        if not _replicable(entry, excluded):
            continue
        if entry.is_default and not use_source_defaults:
            delete.add(entry.name)
        else:
            set_values[entry.name] = entry.value  # type: ignore[assignment]
    return ConfigChanges(set_values, frozenset(delete))


class TopicSync:
    """Keeps the remote topics of one replication in step with the eligible source topics."""

    def __init__(self, config: SrmConfig, source: str, target: str, source_admin: AdminClient,
                 target_admin: AdminClient, policy: ReplicationPolicy) -> None:
        self.source, self.target = source, target
        self.source_admin, self.target_admin, self.policy = source_admin, target_admin, policy
        self.topic_filter: TopicFilter = topic_filter_for(config, source, target)
        self.heartbeats = config.setting("heartbeats.replication.enabled", source, target)
        self.sync_configs = config.setting("sync.topic.configs.enabled", source, target)
        defaults_from = config.setting("use.defaults.from", source, target) or "target"
        self.use_source_defaults = defaults_from.lower() == "source"
        self.excluded = frozenset(config.setting("config.properties.exclude", source, target))
        # MM2 defaults to 2 replicas; -1 lets the target broker decide when the file does not say.
        self.replication_factor = config.setting("replication.factor", source, target) or -1
        self._applied: dict[str, ConfigChanges] = {}

    def eligible(self, counts: dict[str, int], allow: Set[str] = frozenset(),
                 deny: Set[str] = frozenset()) -> dict[str, int]:
        return {t: n for t, n in counts.items()
                if should_replicate_topic(t, self.topic_filter, self.policy, self.target, self.heartbeats,
                                          allow, deny)}

    def refresh(self, allow: Set[str] = frozenset(), deny: Set[str] = frozenset()) -> dict[str, int]:
        """Eligible source topic -> partition count, once every remote topic exists with that count."""
        eligible = self.eligible(kafka_clients.partition_counts(self.source_admin, self.source), allow, deny)
        self.ensure_remote(eligible)
        if self.sync_configs:
            self._sync_configs(sorted(eligible))
        return eligible

    def ensure_remote(self, counts: dict[str, int]) -> None:
        """Create missing remote topics and grow the ones with fewer partitions than their source."""
        remote_counts = kafka_clients.partition_counts(self.target_admin, self.target)
        missing = {t: n for t, n in counts.items() if self.remote(t) not in remote_counts}
        if missing:
            source_configs = kafka_clients.topic_configs(self.source_admin, self.source, sorted(missing))
            kafka_clients.ensure_topics(self.target_admin, self.target, [
                TopicSpec(self.remote(t), n, creation_configs(source_configs.get(t, []), self.excluded),
                          self.replication_factor) for t, n in missing.items()])
        grow = {self.remote(t): n for t, n in counts.items()
                if self.remote(t) in remote_counts and remote_counts[self.remote(t)] < n}
        kafka_clients.grow_partitions(self.target_admin, self.target, grow)

    def remote(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.source, topic)

    def _sync_configs(self, topics: list[str]) -> None:
        for topic, entries in kafka_clients.topic_configs(self.source_admin, self.source, topics).items():
            changes = config_changes(entries, self.excluded, self.use_source_defaults)
            if self._applied.get(topic) == changes:
                continue
            LOG.info("%s->%s: syncing configs of %s", self.source, self.target, self.remote(topic))
            kafka_clients.alter_topic_configs(self.target_admin, self.target, self.remote(topic),
                                              changes.set_values, set(changes.delete))
            self._applied[topic] = changes
