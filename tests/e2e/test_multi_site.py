"""Three sites find each other only through Kafka, and a gateway fans queries out to all of them.

Each site is the real `srm-service` CLI (gunicorn master, 2 workers, the advertiser as the master's
child writing to that site's `heartbeats` topic) over its own Redis database, holding rollups written
the way the aggregator writes them. The first test runs the real Registry and `fan_out` in this process
against forged and foreign records; the second asks a real gateway service through the `site` selector.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from confluent_kafka import Producer

from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout
from contract.config import load_config
from contract.records.advertisement import RECORD_TYPE, RECORD_TYPE_HEADER, Advertisement, encode
from contract.records.mm2 import Heartbeat
from service.sites.gateway import Gateway, fan_out
from service.sites.registry import Registry
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess

pytestmark = pytest.mark.e2e

SITES = ("east", "west", "north")
SOURCES = {"east": "north", "west": "east", "north": "west"}  # each site's replication: source -> site
SITE_DB = {"east": 11, "west": 12, "north": 13, "hq": 14}  # each site its own Redis database
INTERVAL_S = 3
NORTH_TOKEN = f"token-{uuid.uuid4().hex}"
FORGED_HOST = "127.0.0.2"  # loopback, but outside the gateway's allowlist


@pytest.fixture(scope="module")
def three_clusters(kafka_clusters: dict[str, str], north_cluster: str) -> dict[str, str]:
    return {**kafka_clusters, "north": north_cluster}


def site_redis(redis_url: str, site: str) -> str:
    return f"{redis_url.rsplit('/', 1)[0]}/{SITE_DB[site]}"


def write_site_metrics(redis_url: str, site: str, records: int) -> None:
    """One replication into ``site`` with ``records`` records in the last minute, via the sink."""
    source, now_ms = SOURCES[site], int(time.time() * 1000)
    start = layout.window_start(now_ms, "10s") - 20_000
    row = {"target": site, "source": source, "topic": f"{source}.orders", "upstream_topic": "orders",
           "group": "", "partition": layout.WHOLE_TOPIC, "metric": "record_count", "window_start": start,
           "count": 1, "sum": records, "min": records, "max": records, "last": records}
    RedisRollupSink(site_redis(redis_url, site), f"e2e-{site}-{uuid.uuid4().hex[:6]}").write([row], 0)


def site_properties(path: Path, clusters: dict[str, str], redis_url: str, site: str, port: int) -> Path:
    extra: dict[str, object] = {
        "service.target.clusters": site, "service.site": site, "service.host": "127.0.0.1",
        "service.port": port, "service.workers": 2, "service.advertisement.interval.seconds": INTERVAL_S}
    if site == "north":
        extra["service.auth.token"] = NORTH_TOKEN
    return srm_properties.write(path, clusters, [], site_redis(redis_url, site), extra)


def srm_service(tmp: Path, name: str, properties: Path) -> ManagedProcess:
    return ManagedProcess.python_module(name, "service", ["--config", str(properties)], tmp).start()


def stop_all(processes: dict[str, ManagedProcess]) -> None:
    for process in processes.values():
        process.stop()
        print(f"--- {process.name} log ---\n{process.log_tail()}")


@pytest.fixture(scope="module")
def site_ports() -> dict[str, int]:
    """Fixed per module: the gateway's configuration names north's URL."""
    return {site: free_port() for site in SITES}


@pytest.fixture
def sites(three_clusters: dict[str, str], redis_url: str, tmp_path: Path,
          site_ports: dict[str, int]) -> Iterator[dict[str, ManagedProcess]]:
    """Fresh per test: a test may kill one."""
    processes: dict[str, ManagedProcess] = {}
    try:
        for site in SITES:
            port = site_ports[site]
            path = tmp_path / f"{site}.properties"
            properties = site_properties(path, three_clusters, redis_url, site, port)
            processes[site] = srm_service(tmp_path, f"service-{site}", properties)
            wait_for_port(port, 60, processes[site].process)
        yield processes
    finally:
        stop_all(processes)


def gateway_properties(path: Path, clusters: dict[str, str], redis_url: str, port: int,
                       north_port: int) -> Path:
    """Site hq: targets west itself (so it reads its own advertisement back), and watches east and north.
    North wants a token, so hq has north's URL: credentials go only to a configured URL."""
    return srm_properties.write(path, clusters, [], site_redis(redis_url, "hq"), {
        "service.site": "hq", "service.target.clusters": "west", "service.remote.clusters": "east, north",
        "service.remote.allowed.hosts": "127.0.0.1", "service.remote.timeout.ms": 5000,
        "service.remote.north.token": NORTH_TOKEN, "service.remote.north.url": f"http://127.0.0.1:{north_port}",
        "service.advertisement.interval.seconds": INTERVAL_S,
        # hq itself is open (loopback only, the test calls it without credentials): credentials go out
        # only because this says so (docs/security.md).
        "service.remote.credentials.without.auth": "true",
        "service.host": "127.0.0.1", "service.port": port})


@pytest.fixture(scope="module")
def gateway_config(three_clusters: dict[str, str], redis_url: str, tmp_path_factory: pytest.TempPathFactory,
                   site_ports: dict[str, int]):
    path = tmp_path_factory.mktemp("gateway") / "gateway.properties"
    return load_config(gateway_properties(path, three_clusters, redis_url, free_port(), site_ports["north"]))


def produce_to_heartbeats(bootstrap: str, records: list[tuple[bytes, bytes, list | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value, headers in records:
        producer.produce("heartbeats", key=key, value=value, headers=headers, partition=0)
    assert producer.flush(30) == 0


def wait_for_sites(registry: Registry, wanted: set[str], timeout_s: float = 90) -> set[str]:
    deadline, seen = time.monotonic() + timeout_s, set()
    while time.monotonic() < deadline:
        seen = {service.site for service in registry.services()}
        if wanted <= seen:
            break
        time.sleep(0.5)
    return seen


def test_gateway_discovers_three_sites_through_kafka_and_survives_a_dead_one(
        sites: dict[str, ManagedProcess], three_clusters: dict[str, str], gateway_config):
    trap = socket.socket()
    trap.bind((FORGED_HOST, 0))
    trap.listen(8)
    trap.setblocking(False)
    now_ms = int(time.time() * 1000)
    trap_port = trap.getsockname()[1]
    # A new site, and a fresher claim to be east: neither may ever be called.
    forged = [Advertisement("http", FORGED_HOST, trap_port, "", "north", site, "9.9", now_ms, 3600.0)
              for site in ("mallory", "east")]
    mm2_heartbeat = Heartbeat("east", "north", now_ms)
    produce_to_heartbeats(three_clusters["north"], [
        *(encode(ad) for ad in forged),
        (mm2_heartbeat.encode_key(), mm2_heartbeat.encode_value(), None),
        (b"\x00\x01", b"garbage", [(RECORD_TYPE_HEADER, RECORD_TYPE)]),
    ])
    registry = Registry(gateway_config)
    registry.start()
    gateway = Gateway.from_config(gateway_config)
    try:
        seen = wait_for_sites(registry, {*SITES, "mallory"})
        assert {*SITES, "mallory"} <= seen, f"discovered only {seen}"
        assert registry.skipped_records >= 1

        answer = fan_out(gateway, registry.services(), "/v2/services", selector="all").to_json()
        statuses = {s["site"]: s["status"] for s in answer["sites"]}
        assert {site: statuses[site] for site in SITES} == dict.fromkeys(SITES, "ok"), answer["sites"]
        for site in SITES:
            assert [s["site"] for s in answer["results"][site]["services"]] == [site]
        assert "not in service.remote.allowed.hosts" in statuses["mallory"]
        assert answer["partial"] is True  # mallory

        one = fan_out(gateway, registry.services(), "/v2/services", selector="north").to_json()
        assert [s["status"] for s in one["sites"]] == ["ok"] and not one["partial"]

        sites["north"].kill()
        after = fan_out(gateway, registry.services(), "/v2/services", selector="all",
                        expired=registry.expired_services()).to_json()
        statuses = {s["site"]: s["status"] for s in after["sites"]}
        assert statuses["east"] == "ok" and statuses["west"] == "ok", after["sites"]
        assert statuses["north"].startswith("error: "), after["sites"]
        assert after["partial"] is True
        assert set(after["results"]) == {"east", "west"}
    finally:
        registry.stop()
        gateway.close()
        connection: tuple[socket.socket, object] | None
        try:
            connection = trap.accept()
        except BlockingIOError:
            connection = None
        trap.close()
    assert connection is None, "the gateway contacted a host outside its allowlist"


def get_json(url: str, **params: str) -> dict:
    response = requests.get(url, params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def children(pid: int) -> list[str]:
    """Command lines of the processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid:
                found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return found


def wait_for_gateway_sites(base: str, wanted: set[str], timeout_s: float = 90) -> set[str]:
    deadline, seen = time.monotonic() + timeout_s, set()
    while time.monotonic() < deadline:
        services = get_json(f"{base}/v2/services")["services"]
        seen = {s["site"] for s in services if s["status"] == "ok" and not s["local"]}
        if wanted <= seen:
            break
        time.sleep(0.5)
    return seen


def test_a_cross_site_query_through_the_gateway_answers_for_every_site_and_names_a_dead_one(
        sites: dict[str, ManagedProcess], three_clusters: dict[str, str], redis_url: str, tmp_path: Path,
        site_ports: dict[str, int]):
    records = {"east": 10, "west": 20, "north": 30}
    for site, count in records.items():
        redis.Redis.from_url(site_redis(redis_url, site)).flushdb()  # the site's database is this test's
        write_site_metrics(redis_url, site, count)
    port = free_port()
    properties = gateway_properties(tmp_path / "gateway.properties", three_clusters, redis_url, port,
                                    site_ports["north"])
    # Every site has advertised before the gateway starts: then each of its workers knows every site
    # from its first answer on (the registry's catch-up), whichever worker answers a request.
    watcher = Registry(load_config(properties))
    watcher.start()
    try:
        advertised = wait_for_sites(watcher, set(SITES))
    finally:
        watcher.stop()
    assert set(SITES) <= advertised, advertised
    gateway = srm_service(tmp_path, "gateway", properties)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port, 60, gateway.process)
        seen = wait_for_gateway_sites(base, set(SITES))
        assert set(SITES) <= seen and "hq" not in seen, seen  # its own advertisement is no remote site
        for process in [*sites.values(), gateway]:  # 2 gunicorn workers, 1 advertiser per deployment
            assert process.process is not None
            kinds = ["advertiser" if "service.sites.advertiser" in c else "worker"
                     for c in children(process.process.pid)]
            assert sorted(kinds) == ["advertiser", "worker", "worker"], (process.name, kinds)

        body = get_json(f"{base}/v2/replications", site="all")
        statuses = {s["site"]: s["status"] for s in body["sites"]}
        assert {site: statuses[site] for site in ("hq", *SITES)} == dict.fromkeys(("hq", *SITES), "ok")
        for site in SITES:  # every site answered from its own Redis: its own replication
            pairs = {(r["source"], r["target"]) for r in body["results"][site]["replications"]}
            assert pairs == {(SOURCES[site], site)}, (site, pairs)

        path = f"/v2/topic-metrics/{SOURCES['north']}/north/orders/record_count"
        one = get_json(base + path, site="north", granularity="10s")
        assert [s["status"] for s in one["sites"]] == ["ok"]
        assert one["results"]["north"]["value"] == records["north"]  # north wants a token: it was sent

        sites["east"].kill()
        after = get_json(f"{base}/v2/replications", site="all")
        statuses = {s["site"]: s["status"] for s in after["sites"]}
        assert statuses["east"].startswith("error: "), after["sites"]
        assert {statuses[site] for site in ("hq", "west", "north")} == {"ok"}, after["sites"]
        assert after["partial"] is True and not {"east"} & set(after["results"])
        assert {"hq", "west", "north"} <= set(after["results"])
    finally:
        stop_all({"gateway": gateway})
