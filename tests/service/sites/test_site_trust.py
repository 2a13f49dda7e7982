"""Allowlist grammar, site URLs and the address checks of the gateway's trust model."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from service.sites.gateway import Gateway, SiteAccess, fan_out
from service.sites.registry import RemoteService
from service.sites.site_trust import (
    Endpoint,
    RefusedAddress,
    Resolver,
    parse_allowed_hosts,
    parse_site_url,
    special_kind,
)
from tests.service.hostile_servers import RecordingServer


def test_entries_may_name_scheme_and_port():
    allowed = parse_allowed_hosts(["https://*.srm.example.com:6670", "http://10.0.0.0/8", "[fd00::1]:7000"])
    assert allowed.allows("east.srm.example.com", 6670, "https")
    assert not allowed.allows("east.srm.example.com", 6671, "https")
    assert not allowed.allows("east.srm.example.com", 6670, "http")
    assert allowed.allows("10.1.2.3", 1, "http") and not allowed.allows("10.1.2.3", 1, "https")
    assert allowed.allows("fd00::1", 7000, "http") and not allowed.allows("fd00::1", 7001, "http")


def test_a_host_only_entry_allows_any_port_and_scheme():
    allowed = parse_allowed_hosts(["srm-?.example.com"])
    assert allowed.allows("srm-a.example.com", 1, "http")
    assert allowed.allows("srm-b.example.com", 443, "https")
    assert not allowed.allows("srm-ab.example.com", 1, "http")


@pytest.mark.parametrize("item, message", [
    ("ftp://x", "scheme must be http or https"),
    ("x:0", "port from 1 to 65535"),
    ("x:http", "port from 1 to 65535"),
    ("[fd00::1", "neither a host glob nor an IP address"),
    ("srm-[ab].example.com", "character classes"),
    ("https://", "names no host"),
])
def test_unusable_entries_say_why(item, message):
    with pytest.raises(ValueError, match=message):
        parse_allowed_hosts([item])


@pytest.mark.parametrize("address, kind", [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("169.254.169.254", "a cloud metadata address"), ("fd00:ec2::254", "a cloud metadata address"),
    ("169.254.1.1", "link-local"), ("fe80::1", "link-local"), ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"), ("240.0.0.1", "reserved"), ("10.1.2.3", None), ("8.8.8.8", None),
])
def test_special_addresses(address, kind):
    assert special_kind(ipaddress.ip_address(address)) == kind


def test_only_an_entry_inside_the_same_range_names_a_special_address():
    metadata = ipaddress.ip_address("169.254.169.254")
    assert not parse_allowed_hosts(["0.0.0.0/0"]).names_explicitly(metadata)
    assert not parse_allowed_hosts(["169.254.0.0/16"]).names_explicitly(metadata)
    assert parse_allowed_hosts(["169.254.169.254"]).names_explicitly(metadata)
    loopback = ipaddress.ip_address("127.0.0.1")
    assert parse_allowed_hosts(["127.0.0.0/8"]).names_explicitly(loopback)
    assert not parse_allowed_hosts(["0.0.0.0/0", "localhost"]).names_explicitly(loopback)


def test_site_urls():
    assert parse_site_url("https://srm-east.example.com") == Endpoint("https", "srm-east.example.com", 443)
    assert parse_site_url("http://[fd00::1]:6670/srm/").base_url == "http://[fd00::1]:6670/srm"
    for bad in ("srm.example.com:6670", "http://x:99999", "http://x/a?b=1", "http://x/../y", "http://"):
        with pytest.raises(ValueError):
            parse_site_url(bad)


def test_names_are_resolved_and_special_addresses_refused_unless_named():
    localhost = Endpoint("http", "localhost", 6670)
    with pytest.raises(RefusedAddress, match=r"localhost resolves to loopback 127\.0\.0\.1"):
        Resolver(parse_allowed_hosts(["localhost"])).checked_address(localhost, configured=False)
    with pytest.raises(RefusedAddress, match="loopback"):  # a configured name is no exception
        Resolver(parse_allowed_hosts([])).checked_address(localhost, configured=True)
    assert Resolver(parse_allowed_hosts(["localhost", "127.0.0.0/8", "::1"])).checked_address(
        localhost, configured=False) in ("127.0.0.1", "::1")
    # An IP literal written in a site's URL is explicit; the same literal from an advertisement is not.
    literal = Endpoint("http", "127.0.0.1", 6670)
    assert Resolver(parse_allowed_hosts([])).checked_address(literal, configured=True) == "127.0.0.1"
    with pytest.raises(RefusedAddress):
        Resolver(parse_allowed_hosts(["0.0.0.0/0"])).checked_address(literal, configured=False)
    with pytest.raises(RefusedAddress, match="cannot resolve"):
        Resolver(parse_allowed_hosts(["*.invalid"])).checked_address(
            Endpoint("http", "nothing.invalid", 1), configured=False)


class _Recorder(BaseHTTPRequestHandler):
    server: RecordingServer[tuple[str, str | None]]  # path, Host

    def do_GET(self) -> None:  # http.server's name
        self.server.requests.append((self.path, self.headers.get("Host")))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[RecordingServer[tuple[str, str | None]]]:
    server = RecordingServer[tuple[str, str | None]](_Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("allowed, status", [
    (["localhost"], "error: localhost resolves to loopback"),  # a glob never unlocks loopback
    (["localhost", "127.0.0.0/8"], "ok"),
])
def test_a_glob_naming_a_loopback_host_calls_it_only_when_loopback_is_named(recorder, allowed, status):
    if socket.getaddrinfo("localhost", None)[0][4][0] != "127.0.0.1":
        allowed = [*allowed, "::1"] if len(allowed) > 1 else allowed
    port = recorder.server_address[1]
    service = RemoteService("east@x", "east", f"http://localhost:{port}", "localhost", port, "http", "",
                            ("east",), "t", 0, 10.0)
    gateway = Gateway("hq", parse_allowed_hosts(allowed), lambda site: SiteAccess(5.0))
    try:
        (answer,) = fan_out(gateway, [service], "/v2/services").sites
    finally:
        gateway.close()
    assert answer.status.startswith(status), answer.status
    expected = [("/v2/services", f"localhost:{port}")] if status == "ok" else []
    assert recorder.requests == expected
