"""The services a gateway knows, read from the ``heartbeats`` topics of the clusters it watches.

Watched clusters: ``service.remote.clusters`` plus this service's own ``service.target.clusters``.
Records without the advertisement header are MM2 heartbeats and are ignored. Everything else is
untrusted (anyone who may produce to ``heartbeats`` can write it): records over the size caps, broken
advertisements, advertisements stamped more than ``service.remote.max.clock.skew.ms`` ahead of this
gateway's clock and sites beyond ``service.remote.max.sites`` are counted (``skipped_records``, shown
in ``/ready``), logged at a bounded rate and skipped; the reader thread outlives any of them.

A service is live while its newest advertisement is younger than ``MISSED_INTERVALS`` of its own
advertised interval (clocks of the sites are assumed NTP-synchronised).

Each gunicorn worker has its own Registry. A worker that has just started answers only once it has read
every watched ``heartbeats`` partition to its end (or ``CATCH_UP_WAIT_S`` after its start, whichever
comes first): otherwise two workers of one gateway could give different answers to ``site=all``, one
of them silently without a site that advertised long before.
The gateway's own advertisement is left out, so a gateway never calls itself.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from clients import kafka_clients
from clients.record_guard import RecordGuard, RecordPlace
from contract.config import SrmConfig
from contract.records.advertisement import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    Advertisement,
    decode,
    is_advertisement,
)
from contract.records.mm2 import RECORD_PARTITION
from contract.replication_policy import HEARTBEATS_TOPIC
from contract.untrusted import Rejected
from service.sites.advertiser import advertisements, advertiser_settings
from service.sites.site_settings import configured_site_names
from service.sites.site_trust import Endpoint, parse_site_url

LOG = logging.getLogger(__name__)

MISSED_INTERVALS = 3
POLL_TIMEOUT_S = 0.2
FORGET_AFTER_MS = 3_600_000  # an expired instance is still reported (as failing) for this long
EXPIRED_STATUS = "error: no live advertisement (expired)"
MAX_INSTANCES_PER_SITE = 8
REOPEN_WAIT_S = (1.0, 5.0)  # first and longest pause before the consumers are opened again
NO_PARTITION = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC)
CATCH_UP_WAIT_S = 15.0  # longest a fresh registry holds answers back while it reads what is there


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
    """Newest advertisement per (instance, target cluster); not thread-safe (the Registry locks).

    Anyone who may write ``heartbeats`` can forge advertisements, so what the book keeps is bounded and
    a forger cannot squat: only live instances count toward the caps (``MAX_INSTANCES_PER_SITE`` per
    site, ``max_sites`` sites), so stale forgeries never keep a real instance out; a dead instance is
    forgotten ``FORGET_AFTER_MS`` after it expired, and sooner, stalest first, when the book is full.
    A configured site (``service.remote.<site>.url``) only takes advertisements at its configured URL,
    and no cap applies to it.
    """

    def __init__(self, ignored_instances: frozenset[str] = frozenset(), *, max_skew_ms: int = 60_000,
                 max_sites: int = 64, configured_sites: Mapping[str, Endpoint] | None = None) -> None:
        self._ignored = ignored_instances
        self._ads: dict[str, dict[str, Advertisement]] = {}
        self.max_skew_ms, self.max_sites = max_skew_ms, max_sites
        self.configured_sites: Mapping[str, Endpoint] = configured_sites or {}
        self.max_kept = max_sites * MAX_INSTANCES_PER_SITE  # instances of unconfigured sites, dead ones too

    def add(self, ad: Advertisement, now_ms: int | None = None) -> bool:
        """Keeps ``ad`` unless it is our own or older than what we have; True when kept. Raises
        Rejected for an advertisement from the future (a forged one would win for ever), for one of a
        configured site away from its configured URL, and for a new (or revived) instance beyond the
        caps (forged ones would pile up without limit)."""
        if ad.instance_id in self._ignored:
            return False
        now_ms = _now_ms() if now_ms is None else now_ms
        if ad.ts > now_ms + self.max_skew_ms:
            raise Rejected(f"advertisement of site {ad.site!r} is stamped {(ad.ts - now_ms) / 1000:.0f} s "
                           f"ahead of this gateway's clock (service.remote.max.clock.skew.ms = "
                           f"{self.max_skew_ms})")
        configured = self.configured_sites.get(ad.site)
        if configured is not None and not _at(ad, configured):
            raise Rejected(f"site {ad.site!r} advertised at {ad.base_url}, not at its configured URL "
                           f"{configured.base_url} (service.remote.{ad.site}.url): not added")
        per_target = self._ads.get(ad.instance_id)
        if configured is None and (per_target is None or not _instance_live(per_target, now_ms)):
            self._make_room(ad, now_ms)
        per_target = self._ads.setdefault(ad.instance_id, {})
        known = per_target.get(ad.target_cluster)
        if known is not None and known.ts >= ad.ts:
            return False
        per_target[ad.target_cluster] = ad
        return True

    def _make_room(self, ad: Advertisement, now_ms: int) -> None:
        """Room for a new or revived instance of an unconfigured site, or Rejected."""
        live_sites: dict[str, int] = {}
        dead: list[tuple[int, str]] = []  # (last seen, instance) of unconfigured sites
        kept = 0
        for instance, per_target in self._ads.items():
            site = next(iter(per_target.values())).site
            if site in self.configured_sites or instance == ad.instance_id:
                continue
            kept += 1
            if _instance_live(per_target, now_ms):
                live_sites[site] = live_sites.get(site, 0) + 1
            else:
                dead.append((max(a.ts for a in per_target.values()), instance))
        if live_sites.get(ad.site, 0) >= MAX_INSTANCES_PER_SITE:
            raise Rejected(f"site {ad.site!r} already has {MAX_INSTANCES_PER_SITE} live instances; "
                           f"{ad.base_url} not added")
        if ad.site not in live_sites and len(live_sites) >= self.max_sites:
            raise Rejected(f"{len(live_sites)} sites live already (service.remote.max.sites); "
                           f"site {ad.site!r} not added")
        # Live instances stay within max_kept (the two caps above): the dead ones make room, stalest first.
        for _, instance in heapq.nsmallest(max(0, kept + 1 - self.max_kept), dead):
            del self._ads[instance]

    def live(self, now_ms: int) -> list[RemoteService]:
        return [s for s in self._merged(now_ms) if is_live(s.last_seen_ms, s.interval_s, now_ms)]

    def expired(self, now_ms: int) -> list[RemoteService]:
        return [s for s in self._merged(now_ms) if not is_live(s.last_seen_ms, s.interval_s, now_ms)]

    def _merged(self, now_ms: int) -> list[RemoteService]:
        merged = [merge_instance(list(per_target.values())) for per_target in self._ads.values()]
        for service in merged:
            if now_ms - service.last_seen_ms > MISSED_INTERVALS * service.interval_s * 1000 + FORGET_AFTER_MS:
                del self._ads[service.instance_id]
        return sorted((s for s in merged if s.instance_id in self._ads), key=lambda s: (s.site, s.base_url))


def _instance_live(per_target: Mapping[str, Advertisement], now_ms: int) -> bool:
    newest = max(per_target.values(), key=lambda ad: ad.ts)
    return is_live(newest.ts, newest.interval_s, now_ms)


def _at(ad: Advertisement, url: Endpoint) -> bool:
    """The advertisement names exactly the configured URL (scheme, host, port and root path)."""
    return (ad.protocol, ad.host.lower().rstrip("."), ad.port, ad.root_path) == (
        url.scheme, url.host.lower().rstrip("."), url.port, url.root_path)


def merge_instance(ads: list[Advertisement]) -> RemoteService:
    """One instance's advertisements in several target clusters as one service (newest wins)."""
    newest = max(ads, key=lambda ad: ad.ts)
    return RemoteService(newest.instance_id, newest.site, newest.base_url, newest.host, newest.port,
                         newest.protocol, newest.root_path, tuple(sorted({ad.target_cluster for ad in ads})),
                         newest.version, newest.ts, newest.interval_s)


def configured_sites(config: SrmConfig) -> dict[str, Endpoint]:
    """Sites with a configured base URL (``service.remote.<site>.url``, a site name may hold dots) and
    that URL; a URL that does not parse is left out here (``Gateway.from_config`` fails on it first)."""
    sites = {}
    for site in configured_site_names(config):
        try:
            sites[site] = parse_site_url(config.get(f"service.remote.{site}.url") or "")
        except ValueError:
            continue
    return sites


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
        self._book = ServiceBook(ignored, max_skew_ms=config.setting("service.remote.max.clock.skew.ms"),
                                 max_sites=config.setting("service.remote.max.sites"),
                                 configured_sites=configured_sites(config))
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._behind = set(self.clusters)  # clusters whose heartbeats partition is not yet read to its end
        self._caught_up = threading.Event()
        self._catch_up_until = 0.0  # monotonic; nothing to wait for until start()
        self.guard = RecordGuard("service advertisements", max_key_bytes=MAX_KEY_BYTES,
                                 max_value_bytes=MAX_VALUE_BYTES, logger=LOG)

    @property
    def skipped_records(self) -> int:
        """Advertisements refused: too large, undecodable, from the future, beyond the caps."""
        return self.guard.rejected

    @property
    def caught_up(self) -> bool:
        """True once every watched heartbeats partition was read to its end (or had no topic yet)."""
        return self._caught_up.is_set()

    def services(self) -> list[RemoteService]:
        self._wait_for_catch_up()
        with self._lock:
            return self._book.live(_now_ms())

    def expired_services(self) -> list[RemoteService]:
        """Services whose advertisements stopped recently: a gateway reports those sites as failing."""
        self._wait_for_catch_up()
        with self._lock:
            return self._book.expired(_now_ms())

    def start(self) -> None:
        self._catch_up_until = time.monotonic() + CATCH_UP_WAIT_S
        if not self._behind:
            self._caught_up.set()
        super().start()

    def _wait_for_catch_up(self) -> None:
        remaining = self._catch_up_until - time.monotonic()
        if remaining > 0 and not self._caught_up.is_set():
            self._caught_up.wait(remaining)

    def _reached_end(self, alias: str) -> None:
        with self._lock:
            self._behind.discard(alias)
            if not self._behind:
                self._caught_up.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout_s)

    def run(self) -> None:
        """Reads until ``stop()``. A bad record is the guard's; any other failure closes the consumers
        and opens them again after a pause: the thread only ends when stopped."""
        wait_s = REOPEN_WAIT_S[0]
        while not self._stopping.is_set():
            consumers: dict[str, Consumer] = {}
            try:
                consumers = {alias: self._consumer(alias) for alias in self.clusters}
                LOG.info("reading service advertisements from %s in %s", HEARTBEATS_TOPIC,
                         ", ".join(consumers))
                while not self._stopping.is_set():
                    for alias, consumer in consumers.items():
                        self._poll(alias, consumer)
                    wait_s = REOPEN_WAIT_S[0]
            except Exception:  # never the end of discovery
                LOG.exception("reading %s failed; reading again in %.0f s", HEARTBEATS_TOPIC, wait_s)
                self._stopping.wait(wait_s)
                wait_s = min(wait_s * 2, REOPEN_WAIT_S[1])
            finally:
                for consumer in consumers.values():
                    consumer.close()

    def _consumer(self, alias: str) -> Consumer:
        # Assigned, not subscribed: no group is ever joined or committed; the compacted topic is read
        # from its start so the current advertisement of every instance is found at once.
        consumer = kafka_clients.consumer(
            self.config, alias, f"srm-service-registry-{uuid.uuid4().hex}",
            # a topic created later is found soon; the end of the partition is reported (catch-up)
            overrides={"topic.metadata.refresh.interval.ms": 5000, "enable.partition.eof": True})
        consumer.assign([TopicPartition(HEARTBEATS_TOPIC, RECORD_PARTITION, OFFSET_BEGINNING)])
        self._note_empty(alias, consumer)
        return consumer

    def _note_empty(self, alias: str, consumer: Consumer) -> None:
        """An empty or absent heartbeats partition has no end to report: nothing there to wait for."""
        if not self._behind:
            return
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(HEARTBEATS_TOPIC, RECORD_PARTITION),
                                                       timeout=5, cached=False)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
            if code in NO_PARTITION:
                self._reached_end(alias)
            return  # otherwise the partition's end, once read, says so
        if high <= low:
            self._reached_end(alias)

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
            if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                self._reached_end(alias)  # no topic yet: nothing advertised there to wait for
            else:
                LOG.warning("reading %s in %s: %s", HEARTBEATS_TOPIC, alias, error)
            return
        if not is_advertisement(message.headers()):  # type: ignore[arg-type]  # stubs: a list, never a dict
            return  # an MM2 heartbeat
        ad = self.guard.read(message, decode, alias)
        if ad is None:
            return
        try:
            with self._lock:
                kept = self._book.add(ad, _now_ms())
        except Rejected as exc:
            self.guard.reject(RecordPlace.of(message, alias), str(exc))
            return
        if kept:
            LOG.debug("advertisement of %s (site %s) seen in %s", ad.base_url, ad.site, alias)


def start_registry(config: SrmConfig) -> Registry:
    registry = Registry(config)
    registry.start()
    return registry


def _now_ms() -> int:
    return int(time.time() * 1000)
