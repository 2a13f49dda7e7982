"""Produces MM2 offset syncs to `mm2-offset-syncs.<target>.internal` on the source cluster.

MM2 compatible: the decision (`offset.lag.max`, gaps, truncation) and the in-flight bound come from
`driver.offset_sync_writer`; this module feeds it every acknowledged record, sends the due syncs to
partition 0 of the compacted single-partition topic, and promotes the delayed ones on each progress
flush, so a quiet partition's latest position reaches the checkpoint side within one flush (KAFKA-15906).
A due sync leaves from the acknowledgement that made it due when one of the 10 permits is free, and
otherwise as soon as a delivery report returns one (the writer's queue refills itself); it is never
overwritten by a later sync of its partition, and `close` drains the queue, so the positions a
hand-over needs are on the topic. Syncs are best-effort, as in MM2: a failed send is logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Final

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from clients import kafka_clients
from clients.kafka_clients import TopicSpec
from contract.config import SrmConfig
from contract.records.mm2 import OffsetSync
from driver.offset_sync_writer import (
    DEFAULT_OFFSET_LAG_MAX,
    DeliveryCallback,
    OffsetSyncWriter,
    PartitionState,
    QueuedOffsetSync,
)

LOG = logging.getLogger(__name__)

OFFSET_SYNCS_TOPIC_CONFIGS: Final = {"cleanup.policy": "compact"}
# Syncs are tiny and capped at 10 in flight: waiting to batch them would only slow them down.
SYNC_PRODUCER_SETTINGS: Final = {"linger.ms": 1, "compression.type": "none"}


def offset_syncs_topic(config: SrmConfig, source: str, target: str) -> tuple[str, TopicSpec]:
    """The cluster holding replication `source -> target`'s offset-syncs topic and the topic to ensure
    there: the sync writer and the checkpoint reader (which reads it before the first sync) both
    create it, so they must create the same one."""
    cluster, topic = config.offset_syncs_location(source, target)
    replicas = config.setting("offset-syncs.topic.replication.factor", source, target)
    return cluster, TopicSpec(topic, 1, OFFSET_SYNCS_TOPIC_CONFIGS, replicas if replicas is not None else -1)


class OffsetSyncEmitter:
    def __init__(self, producer: Producer, topic: str, offset_lag_max: int = DEFAULT_OFFSET_LAG_MAX) -> None:
        self.producer, self.topic = producer, topic
        self.writer = OffsetSyncWriter(self._send, offset_lag_max)
        self.offset_lag_max = offset_lag_max
        self.failed = 0
        # Latest not-yet-due position per partition, handed to the writer's delayed queue in bulk.
        self._latest: dict[tuple[str, int], tuple[int, int]] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}

    @classmethod
    def for_replication(cls, config: SrmConfig, source: str, target: str) -> OffsetSyncEmitter:
        """Creates the offset-syncs topic where `offset-syncs.topic.location` puts it (the source by
        default) if needed, and a producer for it."""
        cluster, spec = offset_syncs_topic(config, source, target)
        lag_max = config.setting("offset.lag.max", source, target)
        if lag_max is None or lag_max < 0:
            raise config.config_error("offset.lag.max", f"must be >= 0, got {lag_max}", source, target)
        kafka_clients.ensure_topics(kafka_clients.admin(config, cluster), cluster, [spec])
        producer = kafka_clients.producer(config, cluster, overrides=SYNC_PRODUCER_SETTINGS,
                                          source=source, target=target)
        return cls(producer, spec.name, lag_max)

    def acknowledged(self, topic: str, partition: int, upstream_offset: int, downstream_offset: int) -> None:
        """A record the target acknowledged (committed, in exactly-once mode), as MM2's commitRecord.

        Hot path: most records only advance the partition state (no gap, no truncation, not stale), which
        is what `PartitionState.update` does for them too; those skip the writer's queue until a flush.
        A due sync is sent at once: a burst of acknowledgements (one producer poll) must not leave only
        its last sync per partition.
        """
        key = (topic, partition)
        state = self._states.get(key)
        if (state is not None and upstream_offset == state.previous_upstream + 1
                and downstream_offset >= state.previous_downstream
                and downstream_offset - state.last_sync_downstream <= self.offset_lag_max):
            state.previous_upstream, state.previous_downstream = upstream_offset, downstream_offset
            self._latest[key] = (upstream_offset, downstream_offset)
            return
        self._latest.pop(key, None)  # superseded: maybe_queue keeps this one
        due = self.writer.maybe_queue(topic, partition, upstream_offset, downstream_offset)
        if state is None:
            # After its first record a partition has a sync, so the fast path's conditions hold.
            state = self.writer.partition_state(topic, partition)
            if state is not None:  # always: maybe_queue made it
                self._states[key] = state
        if due:
            self._fire()

    def acknowledged_run(self, topic: str, partition: int, first_upstream: int, first_downstream: int,
                         last_upstream: int, last_downstream: int) -> None:
        """Records at consecutive upstream offsets acknowledged together, of which the first and last
        record's target offsets are known. When the target offsets are consecutive too, every record's
        is known, and the syncs due are exactly those of feeding each record (`acknowledged`): within
        such a run only staleness makes one due, every `offset.lag.max` + 1 downstream offsets. Otherwise
        (another writer's records in between) the first and last record are fed."""
        self.acknowledged(topic, partition, first_upstream, first_downstream)
        if last_upstream == first_upstream:
            return
        state = self._states.get((topic, partition))
        if state is not None and last_downstream - first_downstream == last_upstream - first_upstream:
            shift, step = first_upstream - first_downstream, self.offset_lag_max + 1
            due = state.last_sync_downstream + step
            while due < last_downstream:
                state.previous_upstream, state.previous_downstream = due + shift - 1, due - 1
                self.acknowledged(topic, partition, due + shift, due)
                due = state.last_sync_downstream + step
            state.previous_upstream, state.previous_downstream = last_upstream - 1, last_downstream - 1
        self.acknowledged(topic, partition, last_upstream, last_downstream)

    def _fire(self) -> None:
        queue = self.writer.queue
        try:
            queue.fire_pending()
        except BufferError:  # the producer queue is full: the sync stays queued for the next call
            LOG.debug("offset-syncs producer queue full; retrying later")
        if queue.saturated:
            # Delivery reports that already arrived return permits, and the queue refills from them.
            self.producer.poll(0)

    def send_due(self) -> None:
        """Each tick: sends what waits for a permit, and serves the delivery reports that return them."""
        self._fire()
        self.producer.poll(0)

    def flush_delayed(self) -> None:
        """Periodic: every partition's latest position becomes due (MM2's commit after offset flush)."""
        for (topic, partition), (upstream, downstream) in self._latest.items():
            self.writer.queue.queue_later(QueuedOffsetSync(topic, partition, upstream, downstream))
        self._latest.clear()
        self.writer.queue.promote_delayed()
        self.send_due()

    def forget(self, keys: Iterable[tuple[str, int]]) -> None:
        """Partitions revoked or (re)assigned: their latest positions are queued, and their next record
        starts a new lifetime with a sync due, as a new MM2 task's first record does."""
        keys = [key for key in keys if key in self._states or key in self._latest]
        if not keys:
            return
        for key in keys:
            latest = self._latest.pop(key, None)
            if latest is not None:
                self.writer.queue.queue_later(QueuedOffsetSync(key[0], key[1], *latest))
            self._states.pop(key, None)
        self.writer.queue.promote_delayed()
        self.writer.forget(keys)
        self._fire()

    def close(self, timeout_s: float = 10.0) -> None:
        """Sends every queued sync (MM2 drops what is pending at task stop), then flushes."""
        self.flush_delayed()
        queue = self.writer.queue
        deadline = time.monotonic() + timeout_s
        while (queue.pending() or queue.in_flight) and time.monotonic() < deadline:
            self._fire()
            self.producer.poll(0.05)
        left = len(queue.pending())
        if left:
            LOG.warning("%d offset syncs not sent within %.0f s of closing %s", left, timeout_s, self.topic)
        self.producer.flush(max(0.0, deadline - time.monotonic()))

    def _send(self, sync: QueuedOffsetSync, done: DeliveryCallback) -> None:
        record = OffsetSync(sync.topic, sync.partition, sync.upstream_offset, sync.downstream_offset)

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                self.failed += 1
            done(None if error is None else KafkaException(error))

        self.producer.produce(self.topic, key=record.encode_key(), value=record.encode_value(), partition=0,
                              on_delivery=delivered)
