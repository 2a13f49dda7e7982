"""One replication `source -> target`: copies the eligible topics and reports raw metrics.

Records are copied as bytes (key, value, headers, timestamp, same partition) to the remote topic the
ReplicationPolicy names. Source offsets are committed only up to records the target acknowledged, so
a restart resumes without loss (at-least-once).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_INVALID, KafkaError, Message, TopicPartition

from driver import kafka_clients
from driver.config import Replication, SrmConfig
from driver.kafka_clients import TopicSpec
from driver.metrics_reporter import PartitionStats, ReplicationStats
from driver.policy import metrics_topic
from driver.topic_filter import should_replicate_topic, topic_filter_for
from driver.wire import raw_metrics

LOG = logging.getLogger(__name__)

POLL_BATCH = 500
COMMIT_INTERVAL_S = 1.0
METRICS_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": str(24 * 3_600_000)}


@dataclass(frozen=True)
class _Polled:
    """What a delivery report needs to know about the source record it acknowledges."""

    stats: PartitionStats
    topic: str
    partition: int
    offset: int
    record_ts: int
    polled_ms: float
    size: int


class ReplicationWorker(threading.Thread):
    def __init__(self, config: SrmConfig, replication: Replication, stopping: threading.Event) -> None:
        super().__init__(name=f"replication-{replication.source}->{replication.target}", daemon=True)
        self.config, self.replication, self.stopping = config, replication, stopping
        source, target = replication.source, replication.target
        self.policy = config.replication_policy(source, target)
        self.topic_filter = topic_filter_for(config, source, target)
        self.refresh_s = config.get_float("refresh.topics.interval.seconds", source, target, default=600.0)
        self.metrics_period_s = config.get_float("metrics.period", source, target, default=30.0)
        self.stats = ReplicationStats(source, target)
        self._committable: dict[tuple[str, int], int] = {}
        self._topics: dict[str, int] = {}

    def run(self) -> None:
        source, target = self.replication.source, self.replication.target
        try:
            self._run(source, target)
        except Exception as exc:  # reported as FAILED in the metrics, then the thread ends
            LOG.exception("replication %s->%s failed", source, target)
            self.stats.status, self.stats.error = "FAILED", f"{type(exc).__name__}: {exc}"
            self._publish_metrics()

    def _run(self, source: str, target: str) -> None:
        self.source_admin = kafka_clients.admin(self.config, source)
        self.target_admin = kafka_clients.admin(self.config, target)
        self.producer = kafka_clients.producer(self.config, target, source=source, target=target)
        kafka_clients.ensure_topics(self.target_admin, target, [
            TopicSpec(metrics_topic(source), 1, METRICS_TOPIC_CONFIGS)])
        self.consumer = kafka_clients.consumer(
            self.config, source, f"srm-driver.{source}-{target}", source=source, target=target,
            overrides={"partition.assignment.strategy": "cooperative-sticky"})
        next_refresh = next_commit = 0.0
        next_report = time.monotonic() + self.metrics_period_s
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                if now >= next_refresh:
                    self._refresh_topics()
                    next_refresh = now + self.refresh_s
                if self._topics:
                    self._copy(self.consumer.consume(POLL_BATCH, timeout=0.2))
                else:  # nothing to replicate yet: wait for the next refresh without spinning
                    self.stopping.wait(min(1.0, max(0.0, next_refresh - now)))
                self.producer.poll(0)
                if now >= next_commit:
                    self._commit()
                    next_commit = now + COMMIT_INTERVAL_S
                if now >= next_report:
                    self._publish_metrics()
                    next_report = now + self.metrics_period_s
        finally:
            self.producer.flush(30)
            self._commit()
            self.consumer.close()

    def _refresh_topics(self) -> None:
        source, target = self.replication.source, self.replication.target
        counts = kafka_clients.partition_counts(self.source_admin, source)
        eligible = {t: n for t, n in counts.items()
                    if should_replicate_topic(t, self.topic_filter, self.policy, target)}
        remote = [TopicSpec(self.policy.format_remote_topic(source, t), n) for t, n in eligible.items()]
        kafka_clients.ensure_topics(self.target_admin, target, remote)
        if eligible != self._topics:
            LOG.info("%s->%s replicates %d topics: %s", source, target, len(eligible), sorted(eligible))
            self._topics = eligible
            self.stats.topics_replicated = len(eligible)
            if eligible:
                self.consumer.subscribe(sorted(eligible))

    def _copy(self, messages: list[Message]) -> None:
        source = self.replication.source
        for message in messages:
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    LOG.warning("consume error on %s: %s", source, message.error())
                continue
            topic, partition = message.topic(), message.partition()
            remote = self.policy.format_remote_topic(source, topic)
            stats = self.stats.partition(topic, partition, remote)
            _, end = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if end is not None and end >= 0:
                stats.source_end_offset = end
            record_ts = message.timestamp()[1]
            polled = _Polled(stats, topic, partition, message.offset(), record_ts, time.time() * 1000,
                             len(message.key() or b"") + len(message.value() or b""))
            self.producer.produce(remote, value=message.value(), key=message.key(), partition=partition,
                                  timestamp=record_ts, headers=message.headers(),
                                  on_delivery=functools.partial(self._delivered, polled))

    def _delivered(self, polled: _Polled, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            raise RuntimeError(f"delivery to {msg.topic()}[{msg.partition()}] failed: {err}")
        now_ms = time.time() * 1000
        polled.stats.replicated(polled.offset, msg.offset(), polled.size, now_ms - polled.record_ts,
                                polled.polled_ms - polled.record_ts)
        self._committable[(polled.topic, polled.partition)] = polled.offset + 1

    def _commit(self) -> None:
        if not self._committable:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in self._committable.items() if o != OFFSET_INVALID]
        self._committable = {}
        self.consumer.commit(offsets=offsets, asynchronous=False)

    def _publish_metrics(self) -> None:
        topic = metrics_topic(self.replication.source)
        for record in self.stats.drain():
            key, value = raw_metrics.encode(record)
            self.producer.produce(topic, value=value, key=key)
        self.producer.poll(0)
