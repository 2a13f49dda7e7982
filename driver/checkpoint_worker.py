"""Consumer-group checkpoints of one replication `source -> target` (MM2 MirrorCheckpointTask compatible).

Every `emit.checkpoints.interval.seconds` the committed offsets of the source's consumer groups are
translated through the offset syncs and written as MM2 Checkpoint records to
`<source>.checkpoints.internal` on the target; with `sync.group.offsets.enabled` they are also
committed to idle target groups; per group-partition metrics go out every `metrics.period`.

Beyond MM2, fail-back is translated: a group on the source consuming a topic that came from the target
(`east.t` on west, replicating west -> east) has no offset syncs of its own, because that topic is
never replicated back (it would be a cycle). Its offsets are translated backwards through the reverse
replication's offset syncs (east -> west) and checkpointed under the original name `t`, with the same
+1 rule, so consumers moving back re-read at most to the previous sync and never skip a record.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import OffsetSpec

from clients import kafka_clients
from clients.kafka_clients import TopicSpec
from clients.retry_backoff import RetryBackoff
from contract.config import ConfigError, Replication, SrmConfig
from contract.records import raw_metrics
from contract.records.mm2 import RECORD_PARTITION, Checkpoint, OffsetSync, WireFormatError
from contract.replication_policy import metrics_topic
from driver import internal_topic_feed as feeds
from driver.checkpoint_metrics import CheckpointStats, GroupPartition
from driver.checkpoint_rules import (
    CheckpointDecider,
    CheckpointPosition,
    checkpoint_is_newer,
    downstream_topic_for,
)
from driver.checkpoint_scope import (
    CheckpointSettings,
    checkpointable_topic,
    is_failback_topic,
)
from driver.control_lists import AllowDenyLists
from driver.group_offset_sync import GroupOffsetSync
from driver.internal_topic_feed import InternalTopicFeed, RecordHandler
from driver.offset_sync_emitter import offset_syncs_topic
from driver.offset_sync_store import OffsetSyncStore
from driver.reader_health import ReplicationReaders
from driver.topic_filter import (
    FoundAtStart,
    GroupFilter,
    TopicFilter,
    group_filter_for,
    should_replicate_group,
    topic_filter_for,
)

LOG = logging.getLogger(__name__)

POLL_TIMEOUT_S: Final = 0.2
RETRY_BACKOFF_S: Final = 5.0
INITIAL_READ_TIMEOUT_S: Final = 120.0
ADMIN_TIMEOUT_S: Final = 30.0
COMPACTED: Final = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class _Committed:
    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    listed_ms: int


class CheckpointWorker(threading.Thread):
    """Checkpoints (and optionally syncs) the consumer groups of one replication."""

    def __init__(self, config: SrmConfig, replication: Replication, stopping: threading.Event,
                 control: AllowDenyLists | None = None, readers: ReplicationReaders | None = None) -> None:
        super().__init__(name=f"checkpoints-{replication.source}->{replication.target}", daemon=True)
        self.readers = readers or ReplicationReaders(replication.name)
        self._reading = False  # started (checkpoints restored, syncs read to their end) and not closed
        self.config, self.replication, self.stopping, self.control = config, replication, stopping, control
        source, target = replication.source, replication.target
        self.settings = CheckpointSettings.of(config, source, target)
        self.policy = config.replication_policy(source, target)
        self.reverse_policy = config.replication_policy(target, source)
        self.topic_filter: TopicFilter = topic_filter_for(config, source, target)
        self.group_filter: GroupFilter = group_filter_for(config, source, target)
        self.group_scope = FoundAtStart(config.setting("refresh.groups.enabled", source, target))
        self.checkpoints_topic = self.policy.checkpoints_topic(source)
        self.decider = CheckpointDecider()
        self.stats = CheckpointStats(source, target, _now_ms())
        self.store = OffsetSyncStore()
        self.reverse_store = OffsetSyncStore()
        self.rounds = self.group_sync_rounds = 0  # completed passes, for operators' logs and tests
        self._groups: set[str] = set()
        self._feeds: list[InternalTopicFeed] = []
        self._reverse_feed: InternalTopicFeed | None = None

    def run(self) -> None:
        if not self.settings.emit_enabled:
            LOG.info("%s: emit.checkpoints.enabled is false; no checkpoints", self.replication.name)
            return
        # Doubling waits with one line each: a cluster refusing our login must not flood the log.
        backoff = RetryBackoff(f"checkpoints of {self.replication.name}", LOG, first_s=RETRY_BACKOFF_S)
        while not self.stopping.is_set():
            try:
                self._run()
                return
            except (KafkaException, kafka_clients.ClusterUnavailable, ConfigError) as exc:
                reason = str(exc)
            except Exception as exc:
                if backoff.failures == 0:
                    LOG.exception("checkpoints of %s failed", self.replication.name)
                reason = f"{type(exc).__name__}: {exc}"
            finally:
                self._close()
            backoff.wait(reason, self.stopping)

    # -- start-up -----------------------------------------------------------------------------------

    def _run(self) -> None:
        source, target = self.replication.source, self.replication.target
        self.source_admin = kafka_clients.admin(self.config, source)
        self.target_admin = kafka_clients.admin(self.config, target)
        self.producer = kafka_clients.producer(self.config, target, source=source, target=target)
        # The consumer-group requests, on clients of their own that an unanswered request replaces.
        self.source_groups = kafka_clients.GroupAdmin(self.config, source)
        self.group_sync = GroupOffsetSync(kafka_clients.GroupAdmin(self.config, target))
        self._create_topics()
        for kind in ("checkpoints", "offset_syncs"):
            self.readers.watch(kind, lambda: self.is_alive() and self._reading)
        restored = self._restore_checkpoints()
        # Without the previous checkpoints only the newest syncs are trusted (MM2 KAFKA-16622).
        self.store = self.settings.sync_store(initialization_must_read_to_end=not restored)
        self.reverse_store = self.settings.sync_store(not restored, reverse=True)
        self._start_forward_feed()
        self._attach_reverse_feed()
        self._reading = True
        self._loop()

    def _create_topics(self) -> None:
        source, target = self.replication.source, self.replication.target
        replicas = self.config.setting("checkpoints.topic.replication.factor", source, target)
        kafka_clients.ensure_topics(self.target_admin, target, [
            TopicSpec(self.checkpoints_topic, 1, COMPACTED, replicas if replicas is not None else -1),
            TopicSpec(metrics_topic(source), 1, raw_metrics.TOPIC_CONFIGS)])
        alias, syncs = offset_syncs_topic(self.config, source, target)  # read before the first sync
        admin = self.source_admin if alias == source else self.target_admin
        kafka_clients.ensure_topics(admin, alias, [syncs])

    def _feed(self, alias: str, topic: str, handle: RecordHandler, syncs: bool = False) -> InternalTopicFeed:
        consumer = kafka_clients.consumer(
            self.config, alias, f"srm-checkpoints.{self.replication.source}-{self.replication.target}",
            overrides={"enable.partition.eof": False}, source=self.replication.source,
            target=self.replication.target)
        caps = feeds.OFFSET_SYNC_CAPS if syncs else feeds.CHECKPOINT_CAPS
        guard = self.readers.guard("offset_syncs" if syncs else "checkpoints", logger=LOG, **caps)
        feed = InternalTopicFeed(consumer, alias, topic, handle, guard=guard, **caps)
        self._feeds.append(feed)
        return feed

    def _restore_checkpoints(self) -> bool:
        """Load the last checkpoint per key from the checkpoints topic (MM2 CheckpointStore)."""
        feed = self._feed(self.replication.target, self.checkpoints_topic, self._restore_one)
        try:
            complete = feed.read_to_end(self.stopping, INITIAL_READ_TIMEOUT_S)
        finally:
            self._feeds.remove(feed)
            feed.close()
        if not complete:
            LOG.warning("could not read %s to its end; trusting only the newest offset syncs",
                        self.checkpoints_topic)
        return complete

    def _restore_one(self, message: Message) -> None:
        if message.value() is None:  # a tombstone: nothing to restore
            return
        checkpoint = feeds.checked_checkpoint(Checkpoint.decode(message.key(), message.value()))
        self.decider.restore(checkpoint.consumer_group_id, checkpoint.topic, checkpoint.partition,
                             checkpoint.upstream_offset, checkpoint.downstream_offset)

    def _start_forward_feed(self) -> None:
        alias, topic = self.config.offset_syncs_location(self.replication.source, self.replication.target)
        feed = self._feed(alias, topic, functools.partial(_apply_sync, self.store, None), syncs=True)
        while not feed.read_to_end(self.stopping, INITIAL_READ_TIMEOUT_S):
            if self.stopping.is_set():
                return
            LOG.warning("still reading %s on %s to its end", topic, alias)
        self.store.mark_read_to_end()

    def _attach_reverse_feed(self) -> None:
        """Follow the reverse replication's syncs once they exist (only needed for fail-back)."""
        if self._reverse_feed is not None:
            return
        # Where the reverse replication (target -> source) writes its syncs.
        alias, topic = self.config.offset_syncs_location(self.replication.target, self.replication.source)
        admin = self.source_admin if alias == self.replication.source else self.target_admin
        if topic not in kafka_clients.partition_counts(admin, alias):
            return
        rename = functools.partial(self.reverse_policy.format_remote_topic, self.replication.target)
        feed = self._feed(alias, topic, functools.partial(_apply_sync, self.reverse_store, rename),
                          syncs=True)
        if feed.read_to_end(self.stopping, INITIAL_READ_TIMEOUT_S):
            self.reverse_store.mark_read_to_end()
            self._reverse_feed = feed
        else:
            self._feeds.remove(feed)
            feed.close()

    def _close(self) -> None:
        self._reading = False
        for feed in self._feeds:
            feed.close()
        self._feeds, self._reverse_feed = [], None
        producer = getattr(self, "producer", None)
        if producer is not None:
            producer.flush(2.0)  # checkpoints are re-emitted every interval: a stop does not wait long
        # Dropping the last reference destroys the handles, which stops their reconnecting (_run makes new).
        for name in ("producer", "source_admin", "target_admin", "source_groups", "group_sync"):
            vars(self).pop(name, None)

    # -- the loop -----------------------------------------------------------------------------------

    def _loop(self) -> None:
        now = time.monotonic()
        next_round, next_sync = now, now + self.settings.sync_interval_s
        next_report = now + self.settings.metrics_period_s
        while not self.stopping.is_set():
            for feed in self._feeds:
                feed.poll(POLL_TIMEOUT_S / len(self._feeds))
                kafka_clients.check(feed.consumer)  # a login refused after the start ends this run
            self.producer.poll(0)
            kafka_clients.check(self.producer)
            now = time.monotonic()
            if now >= next_round:
                self._guarded("checkpoint round", self.checkpoint_round)
                next_round = now + self.settings.emit_interval_s
            if self.settings.sync_enabled and now >= next_sync:
                self._guarded("group offset sync", self.sync_group_offsets)
                next_sync = now + self.settings.sync_interval_s
            if now >= next_report:
                self._guarded("metrics", self._publish_metrics)
                next_report = now + self.settings.metrics_period_s

    def _guarded(self, what: str, action: Callable[[], None]) -> None:
        """One failed pass is logged and retried at its next interval; it never ends the worker."""
        try:
            action()
        except (KafkaException, kafka_clients.ClusterUnavailable) as exc:
            LOG.warning("%s of %s failed: %s", what, self.replication.name, exc)

    def checkpoint_round(self) -> None:
        """List, translate and emit the checkpoints of every eligible group once."""
        self._attach_reverse_feed()
        groups = self._eligible_groups()
        partitions = self._checkpointable_partitions(self._control_lists("topic_lists")) if groups else []
        committed = [entry for group in groups for entry in self._committed_offsets(group, partitions)]
        ends = self._end_offsets({(c.topic, c.partition) for c in committed})
        seen: list[GroupPartition] = []
        for entry in committed:
            key = (entry.group, entry.topic, entry.partition)
            downstream_topic = downstream_topic_for(self.policy, self.replication.source,
                                                    self.replication.target, entry.topic)
            self.stats.observe(key, downstream_topic, entry.offset, ends.get((entry.topic, entry.partition)),
                               entry.listed_ms)
            seen.append(key)
            try:
                self._maybe_emit(entry, downstream_topic)
            except (WireFormatError, ValueError) as exc:  # e.g. commit metadata too long for MM2's format
                LOG.warning("cannot checkpoint group %s on %s-%d: %s", entry.group, entry.topic,
                            entry.partition, exc)
        self.stats.retain(seen)
        self._groups = {c.group for c in committed}
        remaining = self.producer.flush(ADMIN_TIMEOUT_S)
        if remaining:
            LOG.warning("%d checkpoints of %s not acknowledged yet", remaining, self.replication.name)
        self.rounds += 1

    def _eligible_groups(self) -> list[str]:
        listing = kafka_clients.await_result(
            self.source_admin, self.source_admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S))
        for error in listing.errors or []:
            LOG.warning("listing groups on %s: %s", self.replication.source, error)
        allow, deny = self._control_lists("group_lists")
        eligible = (g.group_id for g in listing.valid
                    if should_replicate_group(g.group_id, self.group_filter, allow, deny))
        return sorted(self.group_scope.keep(eligible))

    def _control_lists(self, kind: str) -> tuple[Set[str], Set[str]]:
        """Live srm-control (allow, deny) lists; `kind` is `group_lists` or `topic_lists`."""
        lists = getattr(self.control, kind, None)
        if lists is None:
            return frozenset(), frozenset()
        try:
            return lists(self.replication.source, self.replication.target)
        except Exception as exc:  # the lists are advisory input; the configured filters still apply
            LOG.warning("srm-control %s unavailable for %s: %s", kind, self.replication.name, exc)
            return frozenset(), frozenset()

    def _checkpointable_partitions(self, topic_lists: tuple[Set[str], Set[str]]) -> list[TopicPartition]:
        """Every partition of the source's checkpointable topics: the offsets asked of each group."""
        source, target = self.replication.source, self.replication.target
        counts = kafka_clients.partition_counts(self.source_admin, source)
        return [TopicPartition(topic, partition) for topic, count in sorted(counts.items())
                if checkpointable_topic(topic, self.topic_filter, self.policy, source, target, *topic_lists)
                for partition in range(count)]

    def _committed_offsets(self, group: str, partitions: list[TopicPartition]) -> list[_Committed]:
        """The group's committed offsets of ``partitions``; a group refused is skipped, a source that
        does not answer ends the round (ClusterUnavailable) rather than being asked group by group."""
        listed_ms = _now_ms()
        try:
            answer = self.source_groups.committed(group, partitions)
        except KafkaException as exc:
            LOG.warning("cannot list the offsets of group %s on %s: %s", group, self.replication.source, exc)
            return []
        return [_Committed(group, tp.topic, tp.partition, tp.offset, tp.metadata or "", listed_ms)
                for tp in answer if tp.error is None and tp.offset >= 0]

    def _end_offsets(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
        ends: dict[tuple[str, int], int] = {}
        for tp, future in self.source_admin.list_offsets(request, request_timeout=ADMIN_TIMEOUT_S).items():
            try:
                ends[(tp.topic, tp.partition)] = kafka_clients.await_result(self.source_admin, future).offset
            except KafkaException as exc:
                LOG.debug("no end offset for %s-%d: %s", tp.topic, tp.partition, exc)
        return ends

    def translate(self, group: str, topic: str, partition: int, upstream_offset: int) -> int | None:
        """Downstream offset of a group's committed upstream offset, None if not translatable."""
        downstream = self.store.translate_downstream(group, topic, partition, upstream_offset)
        if downstream is None and is_failback_topic(self.policy, self.replication.source,
                                                    self.replication.target, topic):
            downstream = self.reverse_store.translate_downstream(group, topic, partition, upstream_offset)
        return downstream

    def _maybe_emit(self, entry: _Committed, downstream_topic: str) -> None:
        downstream = self.translate(entry.group, entry.topic, entry.partition, entry.offset)
        if downstream is None:
            return
        candidate = CheckpointPosition(entry.offset, downstream)
        if not checkpoint_is_newer(self.decider.last(entry.group, downstream_topic, entry.partition),
                                   candidate):
            return
        checkpoint = Checkpoint(entry.group, downstream_topic, entry.partition, entry.offset, downstream,
                                entry.metadata)
        self.producer.produce(self.checkpoints_topic, key=checkpoint.encode_key(),
                              value=checkpoint.encode_value(), partition=RECORD_PARTITION,
                              timestamp=entry.listed_ms,
                              on_delivery=functools.partial(self._delivered, entry, checkpoint))

    def _delivered(self, entry: _Committed, checkpoint: Checkpoint, err: KafkaError | None,
                   _msg: Message) -> None:
        # Remembered only once acknowledged, so a lost checkpoint is emitted again next round.
        if err is not None:
            LOG.warning("checkpoint %s not written to %s: %s", checkpoint, self.checkpoints_topic, err)
            return
        self.decider.offer(checkpoint.consumer_group_id, checkpoint.topic, checkpoint.partition,
                           checkpoint.upstream_offset, checkpoint.downstream_offset)
        self.stats.checkpointed((entry.group, entry.topic, entry.partition), checkpoint.upstream_offset,
                                checkpoint.downstream_offset, _now_ms())

    def sync_group_offsets(self) -> None:
        """Commit the latest checkpoints to the idle target groups (MM2 sync.group.offsets)."""
        for group in sorted(self._groups):
            translated = {tp: position.downstream_offset
                          for tp, position in self.decider.checkpoints_of(group).items()}
            try:
                self.group_sync.sync(group, translated)
            except KafkaException as exc:
                LOG.warning("cannot sync group %s to %s: %s", group, self.replication.target, exc)
        self.group_sync_rounds += 1

    def _publish_metrics(self) -> None:
        topic = metrics_topic(self.replication.source)
        for record in self.stats.drain(_now_ms()):
            key, value = raw_metrics.encode(record)
            self.producer.produce(topic, key=key, value=value)
        self.producer.poll(0)


def _apply_sync(store: OffsetSyncStore, rename: Callable[[str], str] | None, message: Message) -> None:
    """Add one offset-sync record; `rename` set: a reverse sync, added as downstream -> upstream."""
    sync = feeds.checked_offset_sync(OffsetSync.decode(message.key(), message.value()))
    if rename is None:
        store.add(sync.topic, sync.partition, sync.upstream_offset, sync.downstream_offset)
    else:
        store.add(rename(sync.topic), sync.partition, sync.downstream_offset, sync.upstream_offset)


def _now_ms() -> int:
    return int(time.time() * 1000)
