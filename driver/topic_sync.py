"""Remote topics follow their source topics: created, grown, and their configs kept in sync.

MM2 compatible (MirrorSourceConnector): a remote topic is created with the source partition count and
the source's replicable configs, raised to the source count when the source grows (never shrunk), and
its configs re-synced on every refresh with DefaultConfigPropertyFilter's exclusions: read-only,
sensitive and static-broker entries never travel; entries at their default value are deleted on the
target (its own default applies) unless `use.defaults.from = source`.

A target that refuses to create (or grow) a remote topic for lack of permission does not stop the
others: the refused topics are left out of what is copied (their records would have nowhere to go)
and `refusal` says why, for the replication to report FAILED until the next refresh succeeds. MM2
only logs such a refusal, and its task then fails on records it cannot send, with a timeout as reason.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Set
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka.admin import AdminClient

from clients import kafka_clients
from clients.kafka_clients import RequestRefused, TopicConfigEntry, TopicSpec
from contract.config import SrmConfig
from contract.replication_policy import ReplicationPolicy
from contract.settings import default_of
from driver.topic_filter import FoundAtStart, TopicFilter, should_replicate_topic, topic_filter_for

LOG = logging.getLogger(__name__)

DEFAULT_CONFIG_PROPERTIES_EXCLUDE: Final[tuple[str, ...]] = default_of("config.properties.exclude", tuple)


@dataclass(frozen=True)
class ConfigChanges:
    set_values: dict[str, str] = field(default_factory=dict)
    delete: frozenset[str] = frozenset()


def _replicable(entry: TopicConfigEntry, excluded: Set[str]) -> bool:
    return not (entry.read_only or entry.sensitive or entry.static_broker or entry.name in excluded
                or entry.value is None)


def creation_configs(entries: Iterable[TopicConfigEntry], excluded: Set[str]) -> dict[str, str]:
    """Configs a new remote topic is created with: the source's explicit, replicable settings."""
    return {e.name: e.value for e in entries
            if e.value is not None and _replicable(e, excluded) and not e.is_default}


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
        elif entry.value is not None:  # always, after _replicable
            set_values[entry.name] = entry.value
    return ConfigChanges(set_values, frozenset(delete))


def refresh_interval_s(config: SrmConfig, source: str, target: str) -> float:
    """How often a replication looks at its source topics: for new topics (refresh.topics.*) and for
    config changes (sync.topic.configs.*), whichever is due sooner; never when neither is enabled."""
    intervals = [math.inf]
    if config.setting("refresh.topics.enabled", source, target):
        intervals.append(config.setting("refresh.topics.interval.seconds", source, target))
    if config.setting("sync.topic.configs.enabled", source, target):
        intervals.append(config.setting("sync.topic.configs.interval.seconds", source, target))
    return min(intervals)


class TopicSync:
    """Keeps the remote topics of one replication in step with the eligible source topics."""

    def __init__(self, config: SrmConfig, source: str, target: str, source_admin: AdminClient,
                 target_admin: AdminClient, policy: ReplicationPolicy) -> None:
        self.source, self.target = source, target
        self.source_admin, self.target_admin, self.policy = source_admin, target_admin, policy
        self.topic_filter: TopicFilter = topic_filter_for(config, source, target)
        self.heartbeats = config.setting("heartbeats.replication.enabled", source, target)
        self.sync_configs = config.setting("sync.topic.configs.enabled", source, target)
        self.configs_interval_s = config.setting("sync.topic.configs.interval.seconds", source, target)
        self._configs_due = 0.0
        # refresh.topics.enabled = false: MM2 replicates the topics it found at start, and no new ones.
        self.scope = FoundAtStart(config.setting("refresh.topics.enabled", source, target))
        defaults_from = config.setting("use.defaults.from", source, target) or "target"
        self.use_source_defaults = defaults_from.lower() == "source"
        self.excluded = frozenset(config.setting("config.properties.exclude", source, target))
        # MM2 defaults to 2 replicas; -1 lets the target broker decide when the file does not say.
        self.replication_factor = config.setting("replication.factor", source, target) or -1
        self._applied: dict[str, ConfigChanges] = {}
        # Why the last refresh left topics out (the target refused their remote topics), or None.
        self.refusal: RequestRefused | None = None

    def eligible(self, counts: dict[str, int], allow: Set[str] = frozenset(),
                 deny: Set[str] = frozenset()) -> dict[str, int]:
        return {t: n for t, n in counts.items()
                if should_replicate_topic(t, self.topic_filter, self.policy, self.target, self.heartbeats,
                                          allow, deny)}

    def is_eligible(self, topic: str, lists: tuple[Set[str], Set[str]] = (frozenset(), frozenset())) -> bool:
        """Whether ``topic`` is replicated, given the srm-control (allow, deny) ``lists``."""
        return should_replicate_topic(topic, self.topic_filter, self.policy, self.target, self.heartbeats,
                                      *lists)

    def refresh(self, allow: Set[str] = frozenset(), deny: Set[str] = frozenset()) -> dict[str, int]:
        """Eligible source topic -> partition count, of the topics whose remote topic exists with that
        count; the ones the target refused are left out, and ``refusal`` says why."""
        eligible = self.eligible(kafka_clients.partition_counts(self.source_admin, self.source), allow, deny)
        eligible = {t: eligible[t] for t in self.scope.keep(eligible)}
        try:
            self.ensure_remote(eligible)
            self.refusal = None
        except RequestRefused as refused:
            self.refusal = refused
            eligible = {t: n for t, n in eligible.items() if self.remote(t) not in refused.resources}
        if self.sync_configs and time.monotonic() >= self._configs_due:
            self._sync_configs(sorted(eligible))
            self._configs_due = time.monotonic() + self.configs_interval_s
        return eligible

    def ensure_remote(self, counts: dict[str, int]) -> None:
        """Create missing remote topics and grow the ones with fewer partitions than their source."""
        """Create missing remote topics and grow the ones with fewer partitions than their source.
        Raises RequestRefused naming every topic the target refused, after doing the rest."""
        remote_counts = kafka_clients.partition_counts(self.target_admin, self.target)
        missing = {t: n for t, n in counts.items() if self.remote(t) not in remote_counts}
        refusals: list[RequestRefused] = []
        if missing:
            source_configs = kafka_clients.topic_configs(self.source_admin, self.source, sorted(missing))
            try:
                kafka_clients.ensure_topics(self.target_admin, self.target, [
                    TopicSpec(self.remote(t), n, creation_configs(source_configs.get(t, []), self.excluded),
                              self.replication_factor) for t, n in missing.items()])
            except RequestRefused as refused:
                refusals.append(refused)
        grow = {self.remote(t): n for t, n in counts.items()
                if self.remote(t) in remote_counts and remote_counts[self.remote(t)] < n}
        try:
            kafka_clients.grow_partitions(self.target_admin, self.target, grow)
        except RequestRefused as refused:
            refusals.append(refused)
        if refusals:
            raise RequestRefused.joined(refusals)

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


class TopicRefusals:
    """What the target refuses a replication, as it reports it: the reason (None while nothing is
    refused), one WARNING when a refusal starts or changes, one INFO when it ends."""

    def __init__(self, replication: str) -> None:
        self.replication = replication
        self.reason: str | None = None
        self._changed = False

    def note(self, refused: RequestRefused | None, retry_s: float) -> None:
        reason = None if refused is None else str(refused)
        if reason == self.reason:
            return
        if reason is not None:
            LOG.warning("%s: %s; the other topics are copied, the refused ones tried again every %.0f s",
                        self.replication, reason, retry_s)
        else:
            LOG.info("%s: the target now has every remote topic it needs", self.replication)
        self.reason, self._changed = reason, True

    def take_change(self) -> bool:
        """True once after each change of reason, so the status is published at once."""
        changed, self._changed = self._changed, False
        return changed
