"""Gateway rules (allowlist, site selection, statuses, merge) and fan-out against local HTTP servers."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from contract.config import ConfigError, parse_config
from service.sites.gateway import (
    TIMEOUT,
    AllowList,
    Gateway,
    SiteAccess,
    SiteAnswer,
    UnknownSite,
    answer_of,
    check_api_path,
    choose_service,
    fan_out,
    merge_answers,
    parse_allowed_hosts,
    select_sites,
    site_access,
)
from service.sites.registry import EXPIRED_STATUS, RemoteService
from service.sites.site_trust import parse_site_url
from tests.service.hostile_servers import RecordingServer

T0 = 1_700_000_000_000


def remote(site: str, host: str = "127.0.0.1", port: int = 6670, ts: int = T0) -> RemoteService:
    return RemoteService(f"{site}@{host}:{port}", site, f"http://{host}:{port}", host, port, "http", "",
                         (site,), "0.1.0", ts, 10.0)


def test_nothing_is_allowed_by_default():
    assert not parse_allowed_hosts([]).allows("127.0.0.1")
    assert not AllowList().allows("srm.example.com")


def test_host_globs_match_names_case_insensitively():
    allowed = parse_allowed_hosts(["*.srm.example.com", "gateway-peer"])
    assert allowed.allows("West.SRM.example.com")
    assert allowed.allows("gateway-peer")
    assert not allowed.allows("srm.example.com.evil.net")
    assert not allowed.allows("evilsrm.example.com")


def test_networks_match_only_ip_literals():
    allowed = parse_allowed_hosts(["10.0.0.0/8", "127.0.0.1", "::1"])
    assert allowed.allows("10.200.3.4") and allowed.allows("127.0.0.1") and allowed.allows("::1")
    assert not allowed.allows("127.0.0.2")
    assert not allowed.allows("10.example.com")


@pytest.mark.parametrize("item", ["10.0.0.0/33", "host name", "a@b", "x:y"])
def test_unusable_allowlist_items_are_named(item):
    with pytest.raises(ValueError, match="is n"):
        parse_allowed_hosts([item])


def test_a_bad_allowlist_in_the_config_names_the_key():
    config = parse_config("clusters = a\na.bootstrap.servers = a:1\n"
                          "service.remote.allowed.hosts = 1.2.3.4/99\n")
    with pytest.raises(ConfigError, match=r"service\.remote\.allowed\.hosts"):
        Gateway.from_config(config)


def test_site_credentials_and_timeouts_come_from_the_config():
    config = parse_config("clusters = a\na.bootstrap.servers = a:1\nservice.remote.timeout.ms = 800\n"
                          "service.remote.east.username = u\nservice.remote.east.password = p\n"
                          "service.remote.east.url = https://srm-east.example.com:6670/srm/\n"
                          "service.remote.north.token = t0k\nservice.remote.north.timeout.ms = 200\n"
                          "service.remote.north.url = http://10.1.2.3\n")
    east = site_access(config, "east", 800)
    assert east.headers() == {"Authorization": "Basic dTpw"} and east.timeout_s == 0.8
    assert east.url is not None and east.url.base_url == "https://srm-east.example.com:6670/srm"
    north = site_access(config, "north", 800)
    assert north.headers() == {"Authorization": "Bearer t0k"}
    assert north.timeout_s == 0.2 and north.url is not None and north.url.base_url == "http://10.1.2.3"
    assert "t0k" not in repr(north) and "'p'" not in repr(east)


@pytest.mark.parametrize("lines, key", [
    ("service.remote.x.username = u\nservice.remote.x.token = t\n", "service.remote.x.token"),
    ("service.remote.x.password = p\n", "service.remote.x.password"),
    ("service.remote.x.timeout.ms = 0\n", "service.remote.x.timeout.ms"),
    ("service.remote.x.token = t\n", "service.remote.x.token"),  # credentials need the site's URL
    ("service.remote.x.url = ftp://x:21\n", "service.remote.x.url"),
    ("service.remote.x.url = http://u:p@x:1\n", "service.remote.x.url"),
])
def test_contradictory_site_settings_name_the_key(lines, key):
    config = parse_config("clusters = a\na.bootstrap.servers = a:1\n" + lines)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        site_access(config, "x", 1000)


def test_site_selection():
    live = [remote("east"), remote("west"), remote("north", ts=T0 + 5), remote("north", "10.9.9.9")]
    expired = [remote("south")]
    everything = select_sites("all", "west", True, live, expired)
    assert everything.local and sorted(everything.remote) == ["east", "north"]
    assert everything.gone == ["south"]
    assert [s.last_seen_ms for s in everything.remote["north"]] == [T0 + 5, T0]
    assert select_sites("all", "west", False, live).local is False
    only_local = select_sites("local", "west", True, live, expired)
    assert only_local.local and not only_local.remote and not only_local.gone
    assert select_sites("west", "west", True, live).local
    east = select_sites("east", "west", True, live, expired)
    assert not east.local and list(east.remote) == ["east"]
    assert select_sites("south", "west", True, live, expired).gone == ["south"]
    with pytest.raises(UnknownSite, match="unknown site 'mars'; known: east, north, south, west"):
        select_sites("mars", "west", True, live, expired)


def test_the_freshest_allowed_service_of_a_site_is_chosen():
    forged, genuine = remote("east", "203.0.113.9", ts=T0 + 9), remote("east", "127.0.0.1")
    allowed = parse_allowed_hosts(["127.0.0.0/8"])
    assert choose_service([forged, genuine], allowed) == genuine
    assert choose_service([forged], allowed) is None


@pytest.mark.parametrize("path", ["v2/x", "//evil.com/x", "/v2/../admin", "/v2/x?y=1", "/v2/x#f", "/a://b"])
def test_only_plain_api_paths_are_forwarded(path):
    with pytest.raises(ValueError):
        check_api_path(path)


def test_site_status_from_http_answers():
    assert answer_of("e", "u", 200, {"a": 1}, True, 1.0).status == "ok"
    assert answer_of("e", "u", 200, None, False, 1.0).status == "error: answer is not JSON"
    assert answer_of("e", "u", 404, {"message": "no topic"}, True, 1.0).status == "error: HTTP 404: no topic"
    assert answer_of("e", "u", 502, None, False, 1.0).status == "error: HTTP 502"


def test_merge_lists_every_site_and_is_partial_when_one_failed():
    merged = merge_answers([SiteAnswer("west", "ok", "u2", 200, {"v": 2}, 3.0),
                            SiteAnswer("east", "ok", "u1", 200, {"v": 1}, 2.0),
                            SiteAnswer("north", TIMEOUT, "u3", elapsed_ms=500.0)])
    assert merged["partial"] is True
    assert [(s["site"], s["status"]) for s in merged["sites"]] == [("east", "ok"), ("north", "timeout"),
                                                                   ("west", "ok")]
    assert merged["results"] == {"east": {"v": 1}, "west": {"v": 2}}
    assert "items" not in merged


def test_merge_concatenates_list_answers_tagged_with_their_site():
    merged = merge_answers([SiteAnswer("east", "ok", body=[{"t": "a"}]),
                            SiteAnswer("west", "ok", body=[{"t": "b"}, 3])])
    assert merged["partial"] is False
    assert merged["items"] == [{"t": "a", "site": "east"}, {"t": "b", "site": "west"},
                               {"site": "west", "value": 3}]
    assert merge_answers([])["partial"] is False


class _SiteServer(RecordingServer[tuple[str, str | None]]):
    """A site answering after `delay_s` with its name and the path; `requests`: path and Authorization."""

    daemon_threads = True

    def __init__(self, site: str, delay_s: float) -> None:
        super().__init__(_Handler)
        self.site, self.delay_s = site, delay_s


class _Handler(BaseHTTPRequestHandler):
    server: _SiteServer

    def do_GET(self) -> None:  # http.server's name
        server = self.server
        server.requests.append((self.path, self.headers.get("Authorization")))
        time.sleep(server.delay_s)
        body = json.dumps({"site": server.site, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_site() -> Iterator:
    servers = []

    def start(site: str, delay_s: float = 0.0) -> _SiteServer:
        server = _SiteServer(site, delay_s)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fan_out_answers_with_every_site_even_when_one_is_slow_and_one_is_dead(http_site):
    east, slow = http_site("east"), http_site("north", delay_s=3.0)
    services = [remote("east", port=east.server_address[1]), remote("north", port=slow.server_address[1]),
                remote("south", port=closed_port())]
    timeouts = {"east": 10.0, "north": 0.3, "south": 10.0}
    east_url = parse_site_url(f"http://127.0.0.1:{east.server_address[1]}")

    def access(site: str) -> SiteAccess:
        return SiteAccess(timeouts[site], token="s3cret", url=east_url) if site == "east" \
            else SiteAccess(timeouts[site])

    gateway = Gateway("west", parse_allowed_hosts(["127.0.0.1"]), access,
                      forwards_credentials=True)  # as with its own auth on
    try:
        answer = fan_out(gateway, services, "/v2/topic-metrics/east/west/t/record_count", {"from": "1"},
                         local=lambda: (200, {"site": "west"}), expired=[remote("gone", port=1)]).to_json()
    finally:
        gateway.close()
    statuses = {s["site"]: s["status"] for s in answer["sites"]}
    assert statuses == {"east": "ok", "north": "timeout", "south": "error: cannot connect", "west": "ok",
                        "gone": EXPIRED_STATUS}
    assert answer["partial"] is True
    path = "/v2/topic-metrics/east/west/t/record_count?from=1"
    assert answer["results"]["east"] == {"site": "east", "path": path}
    assert answer["results"]["west"] == {"site": "west"}
    assert east.requests == [("/v2/topic-metrics/east/west/t/record_count?from=1", "Bearer s3cret")]


def test_a_host_outside_the_allowlist_is_never_contacted(http_site):
    target = http_site("east")
    gateway = Gateway("west", parse_allowed_hosts(["*.srm.example.com"]), lambda site: SiteAccess(5.0))
    try:
        answer = fan_out(gateway, [remote("east", port=target.server_address[1])], "/v2/services").to_json()
    finally:
        gateway.close()
    (site,) = answer["sites"]
    assert site["site"] == "east" and "not in service.remote.allowed.hosts" in site["status"]
    assert target.requests == []


def test_a_gateway_without_a_local_part_says_so_for_the_local_selector():
    gateway = Gateway("hq", AllowList(), lambda site: SiteAccess(1.0))
    try:
        (site,) = fan_out(gateway, [], "/v2/services", selector="local").sites
    finally:
        gateway.close()
    assert (site.site, site.status) == ("hq", "error: this service has no local answer for that path")


def test_globs_match_label_by_label_and_never_ip_literals():
    allowed = parse_allowed_hosts(["service-*", "*.srm.example.com", "*.*.*.*"])
    assert allowed.allows("service-east")
    assert not allowed.allows("service-east.attacker.net")  # fnmatch's * crossed the dots
    assert not allowed.allows("a.b.srm.example.com")
    assert not allowed.allows("169.254.169.254")  # metadata address: only a network entry may allow it
    with pytest.raises(ValueError, match="character classes"):
        parse_allowed_hosts(["srm-[a-z].example.com"])


def test_a_body_with_an_integer_beyond_64_bits_is_still_forwarded():
    """Found by the OpenAPI fuzz test: a Grafana query whose filter value was -2**63 - 1 made orjson
    fail the fan-out, a 500."""
    gateway = Gateway("hq", AllowList(), lambda site: SiteAccess(1.0))
    answer = fan_out(gateway, [], "/grafana/query", (), "local", local=lambda: (200, []),
                     body={"filters": [{"values": [[-(2**63) - 1]]}]})
    assert [a.status for a in answer.sites] == ["ok"]
