"""Three sites find each other only through Kafka, and a gateway fans a query out to all of them.

Each site is a gunicorn master (2 workers) serving the real app, whose ``when_ready`` hook starts the
advertiser process writing to that site's ``heartbeats`` topic. The gateway (this test process) runs the
real Registry on the three clusters and calls the services with ``gateway.fan_out``.
"""

from __future__ import annotations

import socket
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from driver.config import load_config
from driver.wire.mm2 import Heartbeat
from service.discovery.advertisement import RECORD_TYPE, RECORD_TYPE_HEADER, Advertisement, encode
from service.discovery.registry import Registry
from service.gateway import Gateway, fan_out
from stack import srm_properties
from stack.kafka_cluster import KafkaClusters, free_port, wait_for_port
from stack.processes import ManagedProcess

pytestmark = pytest.mark.e2e

SITES = ("east", "west", "north")
INTERVAL_S = 3
NORTH_TOKEN = f"token-{uuid.uuid4().hex}"
FORGED_HOST = "127.0.0.2"  # loopback, but outside the gateway's allowlist


@pytest.fixture(scope="module")
def three_clusters(kafka_clusters: dict[str, str]) -> Iterator[dict[str, str]]:
    north = KafkaClusters(["north"]).start()
    try:
        yield {**kafka_clusters, "north": north.bootstrap("north")}
    finally:
        north.cleanup()


def site_properties(path: Path, clusters: dict[str, str], redis_url: str, site: str, port: int) -> Path:
    return srm_properties.write(path, clusters, [], redis_url, {
        "service.target.clusters": site, "service.site": site, "service.host": "127.0.0.1",
        "service.port": port, "service.advertisement.interval.seconds": INTERVAL_S})


def gunicorn_site(tmp: Path, clusters: dict[str, str], redis_url: str,
                  site: str) -> tuple[ManagedProcess, int]:
    port = free_port()
    properties = site_properties(tmp / f"{site}.properties", clusters, redis_url, site, port)
    conf = tmp / f"gunicorn-{site}.conf.py"
    conf.write_text(
        "from driver.config import load_config\n"
        "from service.discovery.advertiser import gunicorn_hooks\n"
        f"bind = '127.0.0.1:{port}'\nworkers = 2\n"
        f"_hooks = gunicorn_hooks(load_config({str(properties)!r}))\n"
        "when_ready = _hooks['when_ready']\non_exit = _hooks['on_exit']\n")
    settings = {"REDIS_URL": redis_url, "SERVICE_SITE": site, "SERVICE_PORT": port,
                "SERVICE_TARGET_CLUSTERS": (site,), "AUTH_TOKEN": NORTH_TOKEN if site == "north" else None}
    process = ManagedProcess(f"service-{site}", [sys.executable, "-m", "gunicorn", "-c", str(conf),
                                                 f"service.app:create_app({settings!r})"],
                             tmp / f"service-{site}.log")
    return process.start(), port


@pytest.fixture(scope="module")
def sites(three_clusters: dict[str, str], redis_url: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    tmp = tmp_path_factory.mktemp("multi-site")
    processes: dict[str, ManagedProcess] = {}
    try:
        for site in SITES:
            processes[site], port = gunicorn_site(tmp, three_clusters, redis_url, site)
            wait_for_port(port, 60, processes[site].process)
        yield processes
    finally:
        for process in processes.values():
            process.stop()
            print(f"--- {process.name} log ---\n{process.log_tail()}")


@pytest.fixture(scope="module")
def gateway_config(three_clusters: dict[str, str], redis_url: str, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gateway") / "gateway.properties"
    return load_config(srm_properties.write(path, three_clusters, [], redis_url, {
        "service.site": "hq", "service.target.clusters": "west", "service.remote.clusters": "east, north",
        "service.remote.allowed.hosts": "127.0.0.1", "service.remote.timeout.ms": 5000,
        "service.remote.north.token": NORTH_TOKEN, "service.advertisement.interval.seconds": INTERVAL_S}))


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
        try:
            connection = trap.accept()
        except BlockingIOError:
            connection = None
        trap.close()
    assert connection is None, "the gateway contacted a host outside its allowlist"
