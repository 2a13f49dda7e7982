"""The registry's book of advertised services: expiry, newest wins, merging, self exclusion."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from contract.config import parse_config
from contract.records.advertisement import Advertisement, encode
from contract.records.mm2 import Heartbeat
from contract.untrusted import Rejected
from service.app import create_app
from service.sites.advertiser import start_advertiser
from service.sites.discovered_directory import install_discovery
from service.sites.registry import (
    FORGET_AFTER_MS,
    MAX_INSTANCES_PER_SITE,
    Registry,
    RemoteService,
    ServiceBook,
    configured_sites,
    is_live,
    own_instances,
    watched_clusters,
)
from service.sites.site_trust import parse_site_url
from stack import srm_properties

T0 = 1_700_000_000_000
INTERVAL_S = 10.0


def advert(site: str = "west", host: str = "10.0.0.2", ts: int = T0,
           target: str | None = None) -> Advertisement:
    return Advertisement("http", host, 6670, "", target or site, site, "0.1.0", ts, INTERVAL_S)


def test_a_service_expires_after_three_missed_intervals():
    assert is_live(T0, INTERVAL_S, T0)
    assert is_live(T0, INTERVAL_S, T0 + 30_000)
    assert not is_live(T0, INTERVAL_S, T0 + 30_001)
    assert is_live(T0, 2.0, T0 + 6_000) and not is_live(T0, 2.0, T0 + 6_001)


def test_live_and_expired_are_split_by_the_advertised_interval():
    book = ServiceBook()
    book.add(advert("west", ts=T0))
    book.add(advert("north", host="10.0.0.3", ts=T0 - 40_000))
    assert [s.site for s in book.live(T0 + 1_000)] == ["west"]
    assert [s.site for s in book.expired(T0 + 1_000)] == ["north"]
    assert [s.site for s in book.live(T0 + 31_000)] == []


def test_only_newer_advertisements_replace_older_ones():
    book = ServiceBook()
    assert book.add(advert(ts=T0))
    assert not book.add(advert(ts=T0 - 1))
    assert not book.add(advert(ts=T0))
    assert book.add(advert(ts=T0 + 5))
    assert book.live(T0)[0].last_seen_ms == T0 + 5


def test_one_instance_advertising_in_several_clusters_is_one_service():
    book = ServiceBook()
    book.add(advert("paris", ts=T0, target="west"))
    book.add(advert("paris", ts=T0 + 7, target="east"))
    (service,) = book.live(T0 + 10)
    assert service.target_clusters == ("east", "west")
    assert service.last_seen_ms == T0 + 7
    assert service.base_url == "http://10.0.0.2:6670"


def test_own_advertisements_are_ignored():
    mine = advert("west")
    book = ServiceBook(frozenset({mine.instance_id}))
    assert not book.add(mine)
    assert book.live(T0) == [] and book.expired(T0) == []


def test_long_gone_services_are_forgotten():
    book = ServiceBook()
    book.add(advert(ts=T0))
    assert book.expired(T0 + 60_000)
    expired_at = T0 + int(3 * INTERVAL_S * 1000)
    assert book.expired(expired_at + FORGET_AFTER_MS)
    assert book.expired(expired_at + FORGET_AFTER_MS + 1) == []
    assert book.live(T0) == []


CONFIG = """clusters = east, west, north
east.bootstrap.servers = e:9092
west.bootstrap.servers = w:9092
north.bootstrap.servers = n:9092
service.target.clusters = west
service.remote.clusters = east, north
service.host = 10.0.0.2
service.port = 6670
"""


def test_the_registry_watches_remote_and_local_clusters_and_knows_itself():
    config = parse_config(CONFIG)
    assert watched_clusters(config) == ["east", "north", "west"]
    assert own_instances(config) == frozenset({advert("west").instance_id})


def test_a_service_without_remote_clusters_is_no_gateway():
    app = create_app({"REDIS_URL": "redis://127.0.0.1:1/0"})
    assert install_discovery(app, parse_config(CONFIG.replace("service.remote.clusters", "#"))) is None
    assert [s["local"] for s in app.test_client().get("/v2/services").get_json()["services"]] == [True]


UNUSED_REDIS = "redis://127.0.0.1:1/0"


def mm2_reader_sees(bootstrap: str, alias_part: str, timeout_s: float = 30) -> list[Heartbeat]:
    """Decodes every record of ``heartbeats`` as an MM2 Heartbeat, as MM2's readers do, until one
    whose source alias contains ``alias_part`` shows up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"mm2-like-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("heartbeats", 0, OFFSET_BEGINNING)])
    beats: list[Heartbeat] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not any(alias_part in b.source_cluster_alias for b in beats):
            beats += [Heartbeat.decode(m.key(), m.value())
                      for m in consumer.consume(100, timeout=0.5) if m.error() is None]
    finally:
        consumer.close()
    return beats


@pytest.mark.integration
def test_advertiser_and_registry_meet_in_a_real_heartbeats_topic(kafka_clusters: dict[str, str]):
    site = f"site-{uuid.uuid4().hex[:8]}"
    advertised = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        # live for 3 intervals: at 1 s a busy machine let the site expire between two reads
        "service.target.clusters": "west", "service.site": site, "service.port": 7001,
        "service.advertisement.interval.seconds": 10, "service.advertised.host": "srm.example.com"}))
    watcher = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "east", "service.remote.clusters": "west", "service.site": "hq"}))
    handle = start_advertiser(advertised)
    app = create_app({"REDIS_URL": UNUSED_REDIS, "SERVICE_SITE": "hq"})
    discovery = install_discovery(app, watcher)
    assert discovery is not None
    try:
        deadline = time.monotonic() + 60
        found: list[RemoteService] = []
        while time.monotonic() < deadline and not found:
            found = [s for s in discovery.registry.services() if s.site == site]
            time.sleep(0.2)
        endpoints = [(s.base_url, s.target_clusters) for s in found]
        assert endpoints == [("http://srm.example.com:7001", ("west",))]
        listed = app.test_client().get("/v2/services").get_json()["services"]
        expected = {"site": site, "host": "srm.example.com", "port": 7001, "local": False, "status": "ok"}
        assert expected.items() <= next(s for s in listed if s["site"] == site).items()
        assert [s["site"] for s in listed if s["local"]] == ["hq"]
    finally:
        discovery.stop()
        handle.stop()
    assert not discovery.registry.is_alive()
    beats = mm2_reader_sees(kafka_clusters["west"], site)
    assert any(site in beat.source_cluster_alias and beat.target_cluster_alias == "west" for beat in beats)


@pytest.mark.integration
def test_a_fresh_registry_answers_only_once_it_has_read_what_was_advertised_before(
        kafka_clusters: dict[str, str]):
    """Each gunicorn worker of a gateway has its own registry: without the catch-up, a worker that had
    not read far yet listed fewer sites than its sibling (a cross-site query silently without one)."""
    site = f"site-{uuid.uuid4().hex[:8]}"
    ad = Advertisement("http", "10.0.0.9", 6670, "", "west", site, "0.1.0", int(time.time() * 1000), 3600.0)
    producer = Producer({"bootstrap.servers": kafka_clusters["west"]})
    key, value, headers = encode(ad)
    sent: list[tuple[str, str | bytes | None]] = list(headers)  # produce's list is invariant
    producer.produce("heartbeats", key=key, value=value, headers=sent, partition=0)
    assert producer.flush(30) == 0
    watcher = parse_config(srm_properties.render(kafka_clusters, [], UNUSED_REDIS, {
        "service.target.clusters": "east", "service.remote.clusters": "west", "service.site": "hq"}))
    registry = Registry(watcher)
    registry.start()
    try:
        assert site in {s.site for s in registry.services()}  # asked at once: no polling
        assert registry.caught_up
    finally:
        registry.stop()


def test_advertisements_from_the_future_are_refused():
    book = ServiceBook(max_skew_ms=60_000)
    assert book.add(advert(ts=T0 + 60_000), now_ms=T0)
    with pytest.raises(Rejected, match="ahead of this gateway's clock"):
        book.add(advert(ts=T0 + 10 * 365 * 86_400_000), now_ms=T0)  # would win for ten years
    assert book.live(T0)[0].last_seen_ms == T0 + 60_000


def test_forged_sites_and_instances_are_capped_configured_sites_always_admitted():
    book = ServiceBook(max_sites=2, configured_sites={"east": parse_site_url("http://10.0.0.4:6670")})
    book.add(advert("a", host="10.0.0.1"), now_ms=T0)
    book.add(advert("b", host="10.0.0.2"), now_ms=T0)
    with pytest.raises(Rejected, match="service.remote.max.sites"):
        book.add(advert("c", host="10.0.0.3"), now_ms=T0)
    assert book.add(advert("east", host="10.0.0.4"), now_ms=T0)
    for n in range(MAX_INSTANCES_PER_SITE - 1):
        assert book.add(advert("a", host=f"10.0.1.{n}"), now_ms=T0)
    with pytest.raises(Rejected, match="instances"):
        book.add(advert("a", host="10.0.2.1"), now_ms=T0)
    assert sorted({s.site for s in book.live(T0)}) == ["a", "b", "east"]


def test_sites_with_a_configured_url_are_known_from_the_config():
    """Before: a site whose name has a dot (``east.dc1``) was not taken for a configured one."""
    config = parse_config(CONFIG + "service.remote.east.url = https://srm-east.example.com:6670\n"
                                   "service.remote.east.token = t\n"
                                   "service.remote.east.dc1.url = http://10.1.0.1:6670/srm\n"
                                   "service.remote.north.timeout.ms = 900\n")
    assert set(configured_sites(config)) == {"east", "east.dc1"}
    assert configured_sites(config)["east.dc1"].base_url == "http://10.1.0.1:6670/srm"


def test_stale_forgeries_do_not_fill_the_caps():
    """Before: expired instances counted toward the caps, so eight stale forged advertisements of
    ``east`` (or 64 stale forged sites) kept the real ones out, also after a gateway restart."""
    book = ServiceBook(max_sites=2)
    stale = T0 - 600_000  # expired (30 s), not yet forgotten
    for n in range(MAX_INSTANCES_PER_SITE):
        assert book.add(advert("east", host=f"10.6.6.{n}", ts=stale), now_ms=T0)
    book.add(advert("forged-1", host="10.6.7.1", ts=stale), now_ms=T0)
    assert book.add(advert("east", host="10.0.0.9", ts=T0), now_ms=T0)
    assert book.add(advert("north", host="10.0.0.8", ts=T0), now_ms=T0)
    assert [(s.site, s.host) for s in book.live(T0)] == [("east", "10.0.0.9"), ("north", "10.0.0.8")]
    with pytest.raises(Rejected, match="service.remote.max.sites"):  # two live sites: the cap holds
        book.add(advert("south", host="10.0.0.7", ts=T0), now_ms=T0)


def test_a_configured_site_takes_only_its_url_and_no_cap():
    """Before: forged advertisements of a configured site at other addresses filled its instance cap
    and the real one at the configured URL was refused."""
    book = ServiceBook(max_sites=1, configured_sites={
        "east": parse_site_url("http://srm-east.example.com:6670"),
        "east.dc1": parse_site_url("https://10.1.0.1/srm")})
    for n in range(MAX_INSTANCES_PER_SITE):
        with pytest.raises(Rejected, match="configured URL"):
            book.add(advert("east", host=f"10.6.6.{n}"), now_ms=T0)
    assert book.add(advert("west", host="10.0.0.5"), now_ms=T0)  # fills max.sites
    assert book.add(advert("east", host="SRM-east.example.com"), now_ms=T0)
    dotted = Advertisement("https", "10.1.0.1", 443, "/srm", "x", "east.dc1", "1", T0, 10.0)
    assert book.add(dotted, now_ms=T0)
    assert sorted(s.site for s in book.live(T0)) == ["east", "east.dc1", "west"]


def test_dead_instances_make_room_stalest_first():
    book = ServiceBook(max_sites=1)  # room for 8 instances, dead ones included
    for n in range(MAX_INSTANCES_PER_SITE):
        assert book.add(advert("a", host=f"10.0.0.{n}", ts=T0 + n), now_ms=T0 + n)
    later = T0 + 60_000  # all eight expired
    assert book.add(advert("b", host="10.0.1.1", ts=later), now_ms=later)
    assert book.add(advert("c", host="10.0.1.2", ts=later + 40_000), now_ms=later + 40_000)
    now = later + 40_000
    assert [s.site for s in book.live(now)] == ["c"]
    kept = {s.host for s in book.expired(now)}
    assert kept == {"10.0.1.1"} | {f"10.0.0.{n}" for n in range(2, MAX_INSTANCES_PER_SITE)}
