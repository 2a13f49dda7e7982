"""The services a gateway knows, read from the ``heartbeats`` topics of the clusters it watches.

Watched clusters: ``service.remote.clusters`` plus this service's own ``service.target.clusters``.
Records without the advertisement header are MM2 heartbeats and are ignored; broken advertisements are
logged and skipped. A service is live while its newest advertisement is younger than
``MISSED_INTERVALS`` of its own advertised interval (clocks of the sites are assumed NTP-synchronised).
The gateway's own advertisement is left out, so a gateway never calls itself.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from contract import kafka_clients
from contract.config import SrmConfig
from contract.records.advertisement import Advertisement, is_advertisement, read_record
from contract.records.mm2 import RECORD_PARTITION
from contract.replication_policy import HEARTBEATS_TOPIC
from service.sites.advertiser import advertisements, advertiser_settings

LOG = logging.getLogger(__name__)

MISSED_INTERVALS = 3
POLL_TIMEOUT_S = 0.2
FORGET_AFTER_INTERVALS = 360  # an expired site is still reported (as failing) for this long
EXPIRED_STATUS = "error: no live advertisement (expired)"


@dataclass(frozen=True)
class RemoteService:
    """One advertised service instance, merged over the clusters it advertises in."""

    instance_id: str
    site: str
    base_url: str
    host: str
    port: int
    protocol: str
    root_path: str
    target_clusters: tuple[str, ...]
    version: str
    last_seen_ms: int
    interval_s: float


def is_live(last_seen_ms: int, interval_s: float, now_ms: int, missed: int = MISSED_INTERVALS) -> bool:
    """Live until ``missed`` advertisement intervals have passed without a newer advertisement."""
    return now_ms - last_seen_ms <= missed * interval_s * 1000


class ServiceBook:
    """Newest advertisement per (instance, target cluster); not thread-safe (the Registry locks)."""

    def __init__(self, ignored_instances: frozenset[str] = frozenset()) -> None:
        self._ignored = ignored_instances
        self._ads: dict[str, dict[str, Advertisement]] = {}

    def add(self, ad: Advertisement) -> bool:
        """Keeps ``ad`` unless it is our own or older than what we have; True when kept."""
        if ad.instance_id in self._ignored:
            return False
        per_target = self._ads.setdefault(ad.instance_id, {})
        known = per_target.get(ad.target_cluster)
        if known is not None and known.ts >= ad.ts:
            return False
        per_target[ad.target_cluster] = ad
        return True

    def live(self, now_ms: int) -> list[RemoteService]:
        return [s for s in self._merged(now_ms) if is_live(s.last_seen_ms, s.interval_s, now_ms)]

    def expired(self, now_ms: int) -> list[RemoteService]:
        return [s for s in self._merged(now_ms) if not is_live(s.last_seen_ms, s.interval_s, now_ms)]

    def _merged(self, now_ms: int) -> list[RemoteService]:
        merged = [merge_instance(list(per_target.values())) for per_target in self._ads.values()]
        for service in merged:
            if not is_live(service.last_seen_ms, service.interval_s, now_ms, FORGET_AFTER_INTERVALS):
                del self._ads[service.instance_id]
        return sorted((s for s in merged if s.instance_id in self._ads), key=lambda s: (s.site, s.base_url))


def merge_instance(ads: list[Advertisement]) -> RemoteService:
    """One instance's advertisements in several target clusters as one service (newest wins)."""
    newest = max(ads, key=lambda ad: ad.ts)
    return RemoteService(newest.instance_id, newest.site, newest.base_url, newest.host, newest.port,
                         newest.protocol, newest.root_path, tuple(sorted({ad.target_cluster for ad in ads})),
                         newest.version, newest.ts, newest.interval_s)


def watched_clusters(config: SrmConfig) -> list[str]:
    return list(dict.fromkeys([*config.service_remote_clusters, *config.service_target_clusters]))


def own_instances(config: SrmConfig) -> frozenset[str]:
    settings = advertiser_settings(config)
    return frozenset(ad.instance_id for ad in advertisements(settings, 0))


class Registry(threading.Thread):
    """Consumes the watched heartbeats topics until ``stop()``; ``services()`` lists the live ones."""

    def __init__(self, config: SrmConfig, clusters: list[str] | None = None,
                 ignored_instances: frozenset[str] | None = None) -> None:
        super().__init__(name="srm-service-registry", daemon=True)
        self.config = config
        self.clusters = clusters if clusters is not None else watched_clusters(config)
        ignored = own_instances(config) if ignored_instances is None else ignored_instances
        self._book = ServiceBook(ignored)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.skipped_records = 0

    def services(self) -> list[RemoteService]:
        with self._lock:
            return self._book.live(_now_ms())

    def expired_services(self) -> list[RemoteService]:
        """Services whose advertisements stopped recently: a gateway reports those sites as failing."""
        with self._lock:
            return self._book.expired(_now_ms())

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        consumers = {alias: self._consumer(alias) for alias in self.clusters}
        LOG.info("reading service advertisements from %s in %s", HEARTBEATS_TOPIC, ", ".join(consumers))
        try:
            while not self._stopping.is_set():
                for alias, consumer in consumers.items():
                    self._poll(alias, consumer)
        finally:
            for consumer in consumers.values():
                consumer.close()

    def _consumer(self, alias: str) -> Consumer:
        # Assigned, not subscribed: no group is ever joined or committed; the compacted topic is read
        # from its start so the current advertisement of every instance is found at once.
        consumer = kafka_clients.consumer(
            self.config, alias, f"srm-service-registry-{uuid.uuid4().hex}",
            overrides={"topic.metadata.refresh.interval.ms": 5000})  # a topic created later is found soon
        consumer.assign([TopicPartition(HEARTBEATS_TOPIC, RECORD_PARTITION, OFFSET_BEGINNING)])
        return consumer

    def _poll(self, alias: str, consumer: Consumer) -> None:
        try:
            messages = consumer.consume(200, timeout=POLL_TIMEOUT_S / max(1, len(self.clusters)))
        except Exception:  # the thread must outlive a cluster's trouble
            LOG.exception("reading %s in %s failed", HEARTBEATS_TOPIC, alias)
            self._stopping.wait(1.0)
            return
        for message in messages:
            self._take(alias, message)

    def _take(self, alias: str, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() not in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                LOG.warning("reading %s in %s: %s", HEARTBEATS_TOPIC, alias, error)
            return
        headers = message.headers()
        ad = read_record(message.key(), message.value(), headers, f"{alias}/{HEARTBEATS_TOPIC}")
        if ad is None:
            self.skipped_records += int(is_advertisement(headers))
            return
        with self._lock:
            if self._book.add(ad):
                LOG.debug("advertisement of %s (site %s) seen in %s", ad.base_url, ad.site, alias)


def start_registry(config: SrmConfig) -> Registry:
    registry = Registry(config)
    registry.start()
    return registry


def _now_ms() -> int:
    return int(time.time() * 1000)
