"""The heartbeat job of one replication: MM2 Heartbeat records into the target's `heartbeats` topic.

MM2 compatible: one record every ``emit.heartbeats.interval.seconds`` (MM2's default of 1 s; SRM's
documentation mentions 5 s, but MM2's default keeps the replication's smoke test and the service's
discovery of replications quick, and the records are 16 bytes), key and value from
``contract.records.mm2.Heartbeat``, partition 0, record timestamp = the heartbeat's timestamp. The topic is
created compacted with one partition and ``heartbeats.topic.replication.factor`` replicas (MM2 default
3; -1, or a cluster with fewer brokers, gets the broker's default).

The job runs for enabled and disabled replications alike, so the `heartbeats` topic exists on every
cluster a replication could start from (SRM convention).
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaError, Message
from confluent_kafka.admin import AdminClient

from clients import kafka_clients
from clients.kafka_clients import ClusterUnavailable, TopicSpec
from contract.config import Replication, SrmConfig
from contract.records.mm2 import RECORD_PARTITION, Heartbeat

LOG = logging.getLogger(__name__)

BROKER_DEFAULT_RF = -1
COMPACTED = {"cleanup.policy": "compact"}
METADATA_TIMEOUT_S = 10.0
MAX_RETRY_WAIT_S = 30.0
FLUSH_TIMEOUT_S = 2.0  # a heartbeat lost at shutdown is harmless; a slow stop is not


def fitted_replication_factor(client: AdminClient, alias: str, wanted: int, setting: str) -> int:
    """``wanted`` replicas, or the broker default (-1) when asked for or the cluster is too small.

    MM2 insists on 3 replicas for its internal topics, which fails on small clusters; a warning plus
    the broker's ``default.replication.factor`` keeps the replication running there.
    """
    if wanted == BROKER_DEFAULT_RF:
        return BROKER_DEFAULT_RF
    brokers = len(kafka_clients.cluster_metadata(client, alias, timeout_s=METADATA_TIMEOUT_S).brokers)
    if wanted > brokers:
        LOG.warning("%s = %d but cluster %s has %d broker(s); using the broker's default replication "
                    "factor", setting, wanted, alias, brokers)
        return BROKER_DEFAULT_RF
    return wanted


def checked_replication_factor(config: SrmConfig, setting: str, source: str | None,
                               target: str | None) -> int:
    """The replication factor ``setting`` asks for: -1 (broker default) or at least 1."""
    wanted = config.setting(setting, source, target)
    if wanted is None or (wanted < 1 and wanted != BROKER_DEFAULT_RF):
        raise config.config_error(setting, "must be -1 (the broker's default) or at least 1", source, target)
    return wanted


class HeartbeatTask(threading.Thread):
    """Emits the heartbeats of one replication until ``stopping`` is set."""

    def __init__(self, config: SrmConfig, replication: Replication, stopping: threading.Event) -> None:
        super().__init__(name=f"heartbeats-{replication.source}->{replication.target}", daemon=True)
        self.config, self.replication, self.stopping = config, replication, stopping
        source, target = replication.source, replication.target
        self.interval_s: float = config.setting("emit.heartbeats.interval.seconds", source, target)
        self.wanted_rf = checked_replication_factor(config, "heartbeats.topic.replication.factor",
                                                    source, target)
        self.topic = config.replication_policy(source, target).heartbeats_topic()
        # Built here so a client setting librdkafka cannot take is a ConfigError at start-up.
        self.producer = kafka_clients.producer(config, target, overrides={"linger.ms": 0},
                                               source=source, target=target)
        self.last_heartbeat_ms: int | None = None

    def run(self) -> None:
        try:
            if self._create_topic():
                self._emit_until_stopped()
        finally:
            self.producer.flush(FLUSH_TIMEOUT_S)

    def _create_topic(self) -> bool:
        """Retries until the topic exists (the target may be down at start); False when stopping."""
        target, wait_s = self.replication.target, self.interval_s
        while not self.stopping.is_set():
            # A new client per attempt: one refused login must not mark every later attempt as refused.
            client = kafka_clients.admin(self.config, target)
            try:
                rf = fitted_replication_factor(client, target, self.wanted_rf,
                                               "heartbeats.topic.replication.factor")
                kafka_clients.ensure_topics(client, target, [TopicSpec(self.topic, 1, COMPACTED, rf)])
                return True
            except ClusterUnavailable as exc:
                LOG.warning("%s: %s; retrying in %.0f s", self.name, exc, wait_s)
                del client
                self.stopping.wait(wait_s)
                wait_s = min(wait_s * 2, MAX_RETRY_WAIT_S)
        return False

    def _emit_until_stopped(self) -> None:
        LOG.info("%s: emitting to %s on %s every %g s", self.name, self.topic, self.replication.target,
                 self.interval_s)
        next_beat = time.monotonic()
        while not self.stopping.is_set():
            self._emit()
            next_beat += self.interval_s
            # After a long stall (a paused process), beat again at once rather than catching up.
            next_beat = max(next_beat, time.monotonic())
            self.stopping.wait(next_beat - time.monotonic())

    def _emit(self) -> None:
        heartbeat = Heartbeat(self.replication.source, self.replication.target, int(time.time() * 1000))
        try:
            self.producer.produce(self.topic, key=heartbeat.encode_key(), value=heartbeat.encode_value(),
                                  partition=RECORD_PARTITION, timestamp=heartbeat.timestamp,
                                  on_delivery=self._delivered)
        except BufferError:
            LOG.warning("%s: producer queue full (target unreachable?); heartbeat skipped", self.name)
        self.producer.poll(0)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            LOG.warning("%s: heartbeat not delivered to %s: %s", self.name, msg.topic(), err)
            return
        timestamp = msg.timestamp()[1]
        self.last_heartbeat_ms = timestamp if timestamp > 0 else int(time.time() * 1000)
