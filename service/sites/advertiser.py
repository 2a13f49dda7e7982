"""Writes this service's advertisement to the ``heartbeats`` topic of each ``service.target.clusters``.

An APScheduler (3.x) BackgroundScheduler job publishes every ``service.advertisement.interval.seconds``
(default 10). Settings: ``service.site`` (default: the target aliases joined by ``+``),
``service.advertised.protocol|host|port|root.path`` for services behind a proxy (defaults: http,
``service.host`` or this machine's name when it binds a wildcard, ``service.port``, no root path).

Exactly one advertiser per deployment process group, also under gunicorn with several workers: the
gunicorn *master* owns it (``gunicorn_hooks``: ``when_ready`` starts it, ``on_exit`` stops it), because
workers come and go while the master lives as long as the deployment. The master does not run it in
its own threads: librdkafka threads do not survive the master's later forks of workers, and a forked
worker that finalises a copied client handle can hang. So the master starts one child process
(``python -m service.sites.advertiser --config …``) that exits when the master goes away, and a
thread of the master starts it again whenever it dies (``AdvertiserSupervisor``; its restarts are
``srm_service_advertiser_restarts_total`` in ``/metrics``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from confluent_kafka import KafkaError, Message, Producer

from clients import kafka_clients
from clients.entry_point import config_parser, start
from contract.config import SrmConfig
from contract.kafka_names import check_site
from contract.records.advertisement import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    PROTOCOLS,
    Advertisement,
    AdvertisementError,
    encode,
    normalize_root_path,
    valid_host,
)
from contract.records.mm2 import RECORD_PARTITION
from contract.replication_policy import HEARTBEATS_TOPIC
from contract.untrusted import Rejected
from service.sites.service_directory import SOFTWARE_VERSION

LOG = logging.getLogger(__name__)

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
FLUSH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class AdvertiserSettings:
    site: str
    protocol: str
    host: str
    port: int
    root_path: str
    interval_s: float
    target_clusters: tuple[str, ...]


def site_name(config: SrmConfig) -> str:
    """This deployment's site: ``service.site``, else its target cluster aliases joined by ``+``."""
    return config.setting("service.site") or "+".join(config.service_target_clusters)


def advertiser_settings(config: SrmConfig) -> AdvertiserSettings:
    """The advertised endpoint from the config; a bad value is a ConfigError naming its key."""
    bind_host = config.setting("service.host") or ""
    default_host = socket.getfqdn() if bind_host in WILDCARD_HOSTS else bind_host
    protocol = (config.setting("service.advertised.protocol") or "").lower()
    if protocol not in PROTOCOLS:
        raise config.config_error("service.advertised.protocol", f"must be one of {', '.join(PROTOCOLS)}")
    host = config.setting("service.advertised.host") or default_host
    if not valid_host(host):
        raise config.config_error("service.advertised.host", f"{host!r} is not a DNS name or an IP address")
    port = config.setting("service.advertised.port")
    port = config.setting("service.port") if port is None else port
    if not 0 < port < 65536:
        raise config.config_error("service.advertised.port", "must be between 1 and 65535")
    interval = config.setting("service.advertisement.interval.seconds")
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:  # gateways refuse other intervals
        raise config.config_error("service.advertisement.interval.seconds",
                                  f"must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g}")
    targets = tuple(config.service_target_clusters)
    root_path = normalize_root_path(config.setting("service.advertised.root.path") or "")
    site = site_name(config)
    try:
        check_site(site)
    except Rejected as exc:
        raise config.config_error("service.site", str(exc)) from None
    settings = AdvertiserSettings(site, protocol, host, port, root_path, interval, targets)
    try:
        advertisements(settings, 0)
    except AdvertisementError as exc:
        raise config.config_error("service.advertised.root.path", str(exc)) from None
    return settings


def advertisements(settings: AdvertiserSettings, now_ms: int) -> list[Advertisement]:
    """One advertisement per target cluster, as of ``now_ms``."""
    return [Advertisement(settings.protocol, settings.host, settings.port, settings.root_path, target,
                          settings.site, SOFTWARE_VERSION, now_ms, settings.interval_s)
            for target in settings.target_clusters]


class Advertiser:
    """Publishes the advertisements; ``publish()`` is the scheduled job (it never raises)."""

    def __init__(self, config: SrmConfig, settings: AdvertiserSettings) -> None:
        self.config, self.settings = config, settings
        self._producers: dict[str, Producer] = {
            alias: kafka_clients.producer(config, alias, overrides={"linger.ms": 0})
            for alias in settings.target_clusters}
        self._topic_ready: set[str] = set()
        self._refused: dict[str, str] = {}  # alias -> why it refuses us (logged once per reason)

    def publish(self) -> None:
        now_ms = int(time.time() * 1000)
        for ad in advertisements(self.settings, now_ms):
            try:
                self._publish_one(ad)
                self._refused.pop(ad.target_cluster, None)
            except kafka_clients.ClusterRejected as exc:  # credentials or TLS: one line per new reason
                if self._refused.get(ad.target_cluster) != exc.fault.message:
                    LOG.error("%s; advertising there retries every interval", exc.fault.message)
                self._refused[ad.target_cluster] = exc.fault.message
            except Exception:  # a cluster being down must not stop the job for the other clusters
                LOG.exception("advertising %s in %s failed; retrying next interval", ad.base_url,
                              ad.target_cluster)
        for alias, producer in self._producers.items():
            left = producer.flush(FLUSH_TIMEOUT_S)
            if left:
                LOG.warning("%d advertisement(s) to %s not yet delivered", left, alias)

    def close(self) -> None:
        for producer in self._producers.values():
            producer.flush(FLUSH_TIMEOUT_S)

    def _publish_one(self, ad: Advertisement) -> None:
        alias = ad.target_cluster
        if alias not in self._topic_ready:
            self._ensure_heartbeats_topic(alias)
            self._topic_ready.add(alias)
        key, value, headers = encode(ad)
        sent: list[tuple[str, str | bytes | None]] = list(headers)  # produce's list is invariant
        self._producers[alias].produce(HEARTBEATS_TOPIC, key=key, value=value, headers=sent,
                                       partition=RECORD_PARTITION, timestamp=ad.ts,
                                       on_delivery=_delivery_report(alias))

    def _ensure_heartbeats_topic(self, alias: str) -> None:
        # MM2 compatible: heartbeats is a single-partition compacted topic; whoever comes first (the
        # driver's heartbeat job or this) creates it. A replication factor above the number of brokers
        # would fail, so it is capped (-1 keeps the broker's default).
        factor = self.config.setting("heartbeats.topic.replication.factor", target=alias) or -1
        client = kafka_clients.admin(self.config, alias)
        if factor > 0:
            brokers = len(kafka_clients.cluster_metadata(client, alias).brokers)
            factor = min(factor, max(1, brokers))
        spec = kafka_clients.TopicSpec(HEARTBEATS_TOPIC, 1, {"cleanup.policy": "compact"}, factor)
        kafka_clients.ensure_topics(client, alias, [spec])


def _delivery_report(alias: str) -> Callable[[KafkaError | None, Message], None]:
    def report(error: KafkaError | None, _: Message) -> None:
        if error is not None:
            LOG.warning("advertisement to %s/%s failed: %s", alias, HEARTBEATS_TOPIC, error)
    return report


class AdvertiserHandle:
    """A running in-process advertiser; ``stop()`` ends the job and flushes what is pending."""

    def __init__(self, advertiser: Advertiser, scheduler: BackgroundScheduler) -> None:
        self.advertiser, self._scheduler = advertiser, scheduler

    def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
            self.advertiser.close()


def start_advertiser(config: SrmConfig) -> AdvertiserHandle:
    """Starts advertising now and every interval in this process (threads, no fork afterwards)."""
    settings = advertiser_settings(config)
    advertiser = Advertiser(config, settings)
    scheduler = BackgroundScheduler(daemon=True, timezone="UTC")
    scheduler.add_job(advertiser.publish, "interval", seconds=settings.interval_s, id="srm-advertisement",
                      next_run_time=datetime.now(UTC), max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(settings.interval_s)))
    scheduler.start()
    LOG.info("advertising site %s at %s://%s:%s%s in %s every %.1f s", settings.site, settings.protocol,
             settings.host, settings.port, settings.root_path, ", ".join(settings.target_clusters),
             settings.interval_s)
    return AdvertiserHandle(advertiser, scheduler)


class AdvertiserProcess:
    """The advertiser as one child process of the gunicorn master (see the module docstring)."""

    def __init__(self, config_path: str) -> None:
        self.config_path = config_path
        self.process: subprocess.Popen | None = None

    def start(self) -> AdvertiserProcess:
        args = [sys.executable, "-m", "service.sites.advertiser", "--config", self.config_path,
                "--parent-pid", str(os.getpid())]
        self.process = subprocess.Popen(args)
        LOG.info("advertiser process %d started", self.process.pid)
        return self

    def alive(self) -> bool:
        # gunicorn's master reaps every child it is told of (waitpid(-1)): poll() then says 0, still "ended".
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


RESTART_WAIT_S = (1.0, 60.0)  # first and longest pause before a dead advertiser is started again
CHECK_EVERY_S = 1.0
_restarts: Any = None  # shared memory counter, created in the master before it forks the workers


def advertiser_restarts() -> int | None:
    """How often this deployment's advertiser was started again after it died; None when no master of
    this process supervises one (not under ``srm-service``, or nothing to advertise)."""
    return None if _restarts is None else int(_restarts.value)


class AdvertiserSupervisor:
    """Keeps one advertiser process running for the master's lifetime: a thread of the master checks it
    every second and starts it again when it died (1 s pause, doubling up to 60 s while it keeps dying
    within a minute), counting the restarts in memory the workers share (``/metrics``)."""

    def __init__(self, config_path: str) -> None:
        global _restarts
        self.config_path = config_path
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.child: AdvertiserProcess | None = None
        self.restarts = _restarts = multiprocessing.RawValue("q", 0)

    def start(self) -> None:
        self.child = AdvertiserProcess(self.config_path).start()
        self._thread = threading.Thread(target=self._watch, name="srm-advertiser-supervisor", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        wait_s, started = RESTART_WAIT_S[0], time.monotonic()
        while not self._stopping.wait(CHECK_EVERY_S):
            if self.child is None or self.child.alive():
                continue
            code = self.child.process.returncode if self.child.process is not None else None
            wait_s = RESTART_WAIT_S[0] if time.monotonic() - started > RESTART_WAIT_S[1] else wait_s
            LOG.error("advertiser process ended (exit status %s); starting it again in %.0f s", code, wait_s)
            if self._stopping.wait(wait_s):
                return
            # Counted before the new process exists: /metrics never shows a restart it has not counted.
            self.restarts.value += 1
            self.child, started = AdvertiserProcess(self.config_path).start(), time.monotonic()
            wait_s = min(wait_s * 2, RESTART_WAIT_S[1])

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(CHECK_EVERY_S * 2)
        if self.child is not None:
            self.child.stop()


def gunicorn_hooks(config: SrmConfig) -> dict[str, Callable[[Any], None]]:
    """gunicorn server hooks running the advertiser in the master: ``cfg.set(name, hook)`` each."""
    settings = advertiser_settings(config)  # a bad advertised endpoint fails now, not in a child later
    if not settings.target_clusters:
        LOG.info("no service.target.clusters: this service advertises nothing")
        return {}
    if not os.path.isfile(config.path):
        raise ValueError(f"the advertiser process reads the config file, but {config.path!r} is not a file")
    supervisor = AdvertiserSupervisor(config.path)  # now: the workers forked later share its counter

    def when_ready(_server: Any) -> None:
        supervisor.start()

    def on_exit(_server: Any) -> None:
        supervisor.stop()

    return {"when_ready": when_ready, "on_exit": on_exit}


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("srm-advertiser", __doc__.splitlines()[0])
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    args = parser.parse_args(argv)
    # APScheduler logs every run at INFO: two lines per interval drown the service's log.
    logging.getLogger("apscheduler.executors").setLevel(logging.WARNING)
    handle = start("srm-advertiser", args, start_advertiser)
    if isinstance(handle, int):
        return handle
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    # An orphan would keep advertising a service that is gone: leave when the master does.
    while not stopping.wait(1.0):
        if args.parent_pid is not None and os.getppid() != args.parent_pid:
            LOG.warning("gunicorn master %d is gone; advertiser exits", args.parent_pid)
            break
    handle.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
