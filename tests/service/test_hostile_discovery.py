"""Hostile records in a real ``heartbeats`` topic: discovery goes on, forged advertisements lose.

Before: an advertisement value ending in ``b"[" * 3000`` raised RecursionError out of the registry's
record handling, the discovery thread died, and since the compacted topic is read from its start it
died again after every restart: every site expired for good.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from contract.config import parse_config
from contract.records.advertisement import RECORD_TYPE, RECORD_TYPE_HEADER, Advertisement, encode
from contract.records.mm2 import Heartbeat
from service.app import create_app
from service.sites.advertiser import start_advertiser
from service.sites.discovered_directory import install_discovery
from service.sites.gateway import fan_out
from service.sites.registry import RemoteService
from stack import srm_properties
from tests.service.hostile_servers import RecordingServer

pytestmark = pytest.mark.integration

UNUSED_REDIS = "redis://127.0.0.1:1/0"


def _produce(bootstrap: str, records: list[tuple[bytes, bytes]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:  # as the advertiser creates it: compacted, one partition
        admin.create_topics([NewTopic("heartbeats", 1, 1, config={"cleanup.policy": "compact"})])[
            "heartbeats"].result(30)
    except KafkaException as exc:
        if "already exists" not in str(exc):
            raise
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce("heartbeats", key=key, value=value, partition=0,
                         headers=[(RECORD_TYPE_HEADER, RECORD_TYPE)])
    assert producer.flush(10) == 0


def test_poison_advertisements_then_a_new_site_is_still_discovered(kafka_clusters: dict[str, str]):
    run = uuid.uuid4().hex[:8]
    poison_key = Heartbeat(f"srm-service:poison-{run}@http://x:1", "west", 1).encode_key()
    prefix = Heartbeat("x", "west", 1).encode_value()
    now = int(time.time() * 1000)
    forged_future = Advertisement("http", "forged.example.com", 7002, "", "west", f"far-{run}", "x",
                                  now + 10 * 365 * 86_400_000, 10.0)
    _produce(kafka_clusters["west"], [
        (poison_key, prefix + b"[" * 3000),  # RecursionError in json.loads
        (poison_key, prefix + b" " * 10_000),  # over the value cap
        encode(forged_future)[:2],  # ten years ahead: would win over every genuine advertisement
    ])
    site = f"site-{run}"
    advertised = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "west", "service.site": site, "service.port": 7001,
        "service.advertisement.interval.seconds": 1, "service.advertised.host": "srm.example.com"}))
    watcher = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "east", "service.remote.clusters": "west", "service.site": "hq"}))
    app = create_app({"REDIS_URL": UNUSED_REDIS, "SERVICE_SITE": "hq"})
    discovery = install_discovery(app, watcher)
    assert discovery is not None
    handle = start_advertiser(advertised)
    try:
        deadline = time.monotonic() + 60
        found: list[RemoteService] = []
        while time.monotonic() < deadline and not found:
            found = [s for s in discovery.registry.services() if s.site == site]
            time.sleep(0.2)
        assert [s.base_url for s in found] == ["http://srm.example.com:7001"]
        assert discovery.registry.is_alive()
        assert discovery.registry.skipped_records >= 3
        assert not [s for s in discovery.registry.services() if s.site == f"far-{run}"]
    finally:
        discovery.stop()
        handle.stop()


class _Recorder(BaseHTTPRequestHandler):
    server: RecordingServer[str | None]  # each request's Authorization

    def do_GET(self) -> None:  # http.server's name
        self.server.requests.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listeners() -> Iterator[tuple[RecordingServer[str | None], RecordingServer[str | None]]]:
    servers = []
    for _ in range(2):
        server = RecordingServer[str | None](_Recorder)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield servers[0], servers[1]
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_forged_advertisement_of_a_configured_site_never_gets_its_credentials(
        kafka_clusters: dict[str, str], listeners):
    """Before: the freshest advertisement on an allowed host won, and east's token went there."""
    genuine, evil = listeners
    run = uuid.uuid4().hex[:8]
    site = f"east-{run}"
    genuine_port, evil_port = genuine.server_address[1], evil.server_address[1]
    advertised = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "west", "service.site": site, "service.port": genuine_port,
        "service.advertisement.interval.seconds": 1, "service.advertised.host": "127.0.0.1"}))
    watcher = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "east", "service.remote.clusters": "west", "service.site": "hq",
        "service.auth.token": "gw", "service.remote.allowed.hosts": "127.0.0.1",
        f"service.remote.{site}.url": f"http://127.0.0.1:{genuine_port}",
        f"service.remote.{site}.token": "s3cret"}))
    # Fresher than any genuine advertisement, yet within the clock skew: only the configured URL stops it.
    forged = Advertisement("http", "127.0.0.1", evil_port, "", "west", site, "x",
                           int(time.time() * 1000) + 50_000, 10.0)
    _produce(kafka_clusters["west"], [encode(forged)[:2]])
    app = create_app({"REDIS_URL": UNUSED_REDIS, "SERVICE_SITE": "hq"})
    discovery = install_discovery(app, watcher)
    assert discovery is not None
    handle = start_advertiser(advertised)
    try:
        deadline = time.monotonic() + 60
        urls: set[str] = set()
        while time.monotonic() < deadline and not urls:
            urls = {s.base_url for s in discovery.registry.services() if s.site == site}
            time.sleep(0.2)
        # The forged advertisement came first in the topic: by now it was read, and refused.
        assert urls == {f"http://127.0.0.1:{genuine_port}"}
        assert discovery.registry.skipped_records >= 1
        for _ in range(3):
            (answer,) = fan_out(discovery.gateway, discovery.registry.services(), "/v2/replications",
                                selector=site).sites
            assert (answer.status, answer.url) == ("ok", f"http://127.0.0.1:{genuine_port}/v2/replications")
        assert evil.requests == []
        assert genuine.requests == ["Bearer s3cret"] * 3
    finally:
        discovery.stop()
        handle.stop()


def test_squatters_in_heartbeats_keep_no_real_site_out_after_a_gateway_restart(
        kafka_clusters: dict[str, str]):
    """Before: expired instances counted toward the per-site cap and a configured site had that cap
    too, so eight forged advertisements of a site in the compacted topic (stale ones, or fresh ones
    at other addresses) kept the real instance out after every gateway start, even with
    ``service.remote.<site>.url`` set (a site name with a dot was not even taken for configured)."""
    run = uuid.uuid4().hex[:8]
    configured, free = f"east.dc-{run}", f"free-{run}"
    now = int(time.time() * 1000)
    forged = [Advertisement("http", "127.0.0.1", 7100 + n, "", "west", configured, "x", now, 3600.0)
              for n in range(8)]  # live for hours, but not at the configured URL
    forged += [Advertisement("http", "127.0.0.1", 7200 + n, "", "west", free, "x", now - 600_000, 10.0)
               for n in range(8)]  # expired ten minutes ago
    real_free = Advertisement("http", "127.0.0.1", 7300, "", "west", free, "x", now, 3600.0)
    _produce(kafka_clusters["west"], [encode(ad)[:2] for ad in [*forged, real_free]])
    advertised = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "west", "service.site": configured, "service.port": 7001,
        "service.advertisement.interval.seconds": 1, "service.advertised.host": "srm.example.com"}))
    watcher = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "east", "service.remote.clusters": "west", "service.site": "hq",
        f"service.remote.{configured}.url": "http://srm.example.com:7001"}))
    handle = start_advertiser(advertised)
    app = create_app({"REDIS_URL": UNUSED_REDIS, "SERVICE_SITE": "hq"})
    discovery = install_discovery(app, watcher)  # a gateway (re)starting: reads the topic from its start
    assert discovery is not None
    try:
        deadline = time.monotonic() + 60
        found: set[tuple[str, str]] = set()
        while time.monotonic() < deadline and len(found) < 2:
            found = {(s.site, s.base_url) for s in discovery.registry.services()
                     if s.site in (configured, free)}
            time.sleep(0.2)
        assert found == {(configured, "http://srm.example.com:7001"), (free, "http://127.0.0.1:7300")}
    finally:
        discovery.stop()
        handle.stop()
