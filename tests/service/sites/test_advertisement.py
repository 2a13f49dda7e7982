"""The advertisement record: round trip, MM2 readers, broken records, validation, settings."""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from contract.config import ConfigError, parse_config
from contract.records.advertisement import (
    RECORD_TYPE,
    RECORD_TYPE_HEADER,
    Advertisement,
    AdvertisementError,
    decode,
    encode,
    is_advertisement,
    normalize_root_path,
    read_record,
)
from contract.records.mm2 import Heartbeat
from service.sites.advertiser import advertisements, advertiser_settings
from stack import srm_properties

TS = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[3]


def advert(**changes: Any) -> Advertisement:
    fields: dict[str, Any] = {
        "protocol": "https", "host": "srm.west.example.com", "port": 6670, "root_path": "/srm",
        "target_cluster": "west", "site": "west", "version": "0.1.0", "ts": TS, "interval_s": 10.0}
    return Advertisement(**{**fields, **changes})


def test_round_trip_keeps_every_field():
    ad = advert()
    key, value, headers = encode(ad)
    assert headers == [(RECORD_TYPE_HEADER, RECORD_TYPE)]
    assert decode(key, value) == ad
    assert read_record(key, value, headers) == ad
    assert ad.base_url == "https://srm.west.example.com:6670/srm"


def test_value_is_json_after_the_mm2_heartbeat_prefix():
    key, value, _ = encode(advert())
    assert struct.unpack(">hq", value[:10]) == (0, TS)
    body = json.loads(value[10:])
    assert {"protocol", "host", "port", "root_path", "target_cluster", "site", "version", "ts"} <= set(body)
    assert body["v"] == 1


def test_mm2_heartbeat_reader_decodes_an_advertisement_without_error():
    key, value, _ = encode(advert())
    heartbeat = Heartbeat.decode(key, value)
    assert heartbeat.target_cluster_alias == "west"
    assert heartbeat.timestamp == TS
    assert heartbeat.source_cluster_alias.startswith("srm-service:")


def test_mm2_heartbeats_are_not_advertisements():
    beat = Heartbeat("east", "west", TS)
    assert read_record(beat.encode_key(), beat.encode_value(), None) is None
    assert read_record(beat.encode_key(), beat.encode_value(), [("other", b"x")]) is None
    assert not is_advertisement([(RECORD_TYPE_HEADER, b"something-else")])
    assert is_advertisement([(RECORD_TYPE_HEADER, "service-advertisement")])


@pytest.mark.parametrize("key, value", [
    (b"\x00", b"\x00\x00"),
    (Heartbeat("east", "west", TS).encode_key(), Heartbeat("east", "west", TS).encode_value() + b"{}"),
    (encode(advert())[0], encode(advert())[1][:10] + b"not json"),
    (encode(advert())[0], encode(advert())[1][:10] + b'{"v": 1, "host": "x"}'),
    (encode(advert())[0], encode(advert())[1][:10] + json.dumps({"v": 9}).encode()),
    (None, None),
])
def test_broken_advertisements_are_skipped_and_logged(key, value, caplog):
    with caplog.at_level(logging.WARNING):
        assert read_record(key, value, [(RECORD_TYPE_HEADER, RECORD_TYPE)], "west/heartbeats") is None
    assert "west/heartbeats: skipped an undecodable service advertisement" in caplog.text


def test_a_value_naming_another_instance_than_its_key_is_rejected():
    key, _, _ = encode(advert())
    _, value, _ = encode(advert(host="other.example.com"))
    with pytest.raises(AdvertisementError, match="key names"):
        decode(key, value)


def test_wrong_field_types_are_rejected():
    key, value, _ = encode(advert())
    body = json.loads(value[10:])
    body["port"] = "6670"
    with pytest.raises(AdvertisementError, match="'port' has the wrong type"):
        decode(key, value[:10] + json.dumps(body).encode())


@pytest.mark.parametrize("changes, problem", [
    ({"protocol": "ftp"}, "protocol"),
    ({"host": "evil.example.com/#"}, "host"),
    ({"host": "user@allowed.example.com"}, "host"),
    ({"host": ""}, "host"),
    ({"port": 0}, "port"),
    ({"port": 70000}, "port"),
    ({"root_path": "/a/../b"}, "root path"),
    ({"root_path": "/a?x=1"}, "root path"),
    ({"root_path": "srm"}, "root path"),
    ({"site": ""}, "site"),
    ({"interval_s": 0}, "interval"),
])
def test_invalid_advertisements_cannot_be_built(changes, problem):
    with pytest.raises(AdvertisementError, match=problem):
        advert(**changes)


def test_ip_literals_are_valid_hosts_and_ipv6_is_bracketed():
    assert advert(host="10.1.2.3").base_url == "https://10.1.2.3:6670/srm"
    assert advert(host="::1", root_path="").base_url == "https://[::1]:6670"


@pytest.mark.parametrize("raw, normalized", [("", ""), ("/", ""), ("srm/", "/srm"), ("/a/b/", "/a/b")])
def test_root_paths_are_normalized(raw, normalized):
    assert normalize_root_path(raw) == normalized


BASE = "clusters = east, west\neast.bootstrap.servers = e:9092\nwest.bootstrap.servers = w:9092\n"


def test_settings_default_to_the_service_bind_address_and_target_sites():
    settings = advertiser_settings(parse_config(BASE + "service.target.clusters = west\n"
                                                "service.host = 10.0.0.5\nservice.port = 7000\n"))
    endpoint = (settings.protocol, settings.host, settings.port, settings.root_path)
    assert endpoint == ("http", "10.0.0.5", 7000, "")
    assert settings.site == "west"
    assert settings.interval_s == 10.0
    ads = advertisements(settings, TS)
    assert [(a.target_cluster, a.ts) for a in ads] == [("west", TS)]


def test_advertised_settings_override_for_proxies():
    settings = advertiser_settings(parse_config(
        BASE + "service.site = paris\nservice.advertised.protocol = HTTPS\n"
        "service.advertised.host = proxy.example\n"
        "service.advertised.port = 443\nservice.advertised.root.path = srm/api/\n"
        "service.advertisement.interval.seconds = 2.5\n"))
    assert settings.site == "paris"
    assert advertisements(settings, TS)[0].base_url == "https://proxy.example:443/srm/api"
    assert settings.interval_s == 2.5
    assert settings.target_clusters == ("east", "west")


@pytest.mark.parametrize("line, key", [
    ("service.advertised.protocol = gopher", "service.advertised.protocol"),
    ("service.advertised.host = a b", "service.advertised.host"),
    ("service.advertised.port = 0", "service.advertised.port"),
    ("service.advertised.port = many", "service.advertised.port"),
    ("service.advertisement.interval.seconds = -1", "service.advertisement.interval.seconds"),
    ("service.advertised.root.path = /a/../b", "service.advertised.root.path"),
])
def test_bad_advertised_settings_name_the_key(line, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        advertiser_settings(parse_config(BASE + line + "\n"))


def run_advertiser(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.sites.advertiser", *args], capture_output=True,
                          text=True, timeout=timeout_s, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.usefixtures("external_processes")
def test_the_advertiser_process_names_a_bad_config_file(tmp_path):
    bad = tmp_path / "srm.properties"
    bad.write_text(BASE + "service.advertised.port = 99999\n")
    done = run_advertiser("--config", str(bad))
    assert done.returncode == 2
    problem = "service.advertised.port: must be between 1 and 65535"
    assert done.stderr.strip() == f"srm-advertiser: {bad}:4: {problem}"


@pytest.mark.integration
def test_an_orphaned_advertiser_process_exits(tmp_path, kafka_clusters):
    config = srm_properties.write(tmp_path / "srm.properties", kafka_clusters, [], "redis://127.0.0.1:1/0", {
        "service.target.clusters": "west", "service.site": f"orphan-{uuid.uuid4().hex[:6]}"})
    # Its recorded parent (pid 1 here) is not its parent: as after the gunicorn master died.
    done = run_advertiser("--config", str(config), "--parent-pid", "1")
    assert done.returncode == 0, done.stderr
    assert "is gone; advertiser exits" in done.stderr


@pytest.mark.parametrize("changes, message", [
    ({"site": "all"}, "reserved"),
    ({"site": "local"}, "reserved"),
    ({"site": "bad site"}, "not a site name"),
    ({"target_cluster": "we/st"}, "not a cluster alias"),
    ({"interval_s": float("inf")}, "interval"),
    ({"interval_s": 0.01}, "interval"),
    ({"interval_s": 86_400.0}, "interval"),
    ({"ts": -1}, "epoch time"),
    ({"version": "v" * 65}, "version"),
])
def test_advertisements_with_reserved_names_or_unbounded_numbers_are_refused(changes, message):
    fields = {"protocol": "http", "host": "srm.example.com", "port": 6670, "root_path": "",
              "target_cluster": "west", "site": "east", "version": "1", "ts": TS, "interval_s": 10.0}
    with pytest.raises(AdvertisementError, match=message):
        Advertisement(**(fields | changes))


def test_deep_nesting_in_an_advertisement_is_an_advertisement_error():
    key, value, _ = encode(advert())
    with pytest.raises(AdvertisementError, match="not UTF-8 JSON"):
        decode(key, value[:10] + b"[" * 3000)
