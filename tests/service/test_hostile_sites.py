"""Sites that answer garbage, and an open gateway: the fan-out stays whole, no credential leaves.

Before: a remote answer of deeply nested JSON raised RecursionError out of the call, an integer over
64 bits made orjson fail the merged answer, and a Grafana frame ``rows: [1]`` raised TypeError: each of
them turned the whole ``site=all`` answer into a 500. An open gateway (no ``service.auth.*``) sent its
stored per-site token with any caller's request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from werkzeug.serving import make_server

from contract.config import parse_config
from service.app import create_app
from service.sites.discovered_directory import GATEWAY_KEY, REGISTRY_KEY
from service.sites.gateway import Gateway, SiteAccess, fan_out, parse_allowed_hosts
from service.sites.registry import RemoteService

pytestmark = pytest.mark.integration

GARBAGE = {
    "nested": b"[" * 100_000,
    "deep": b"[" * 300 + b"]" * 300,  # parses, but orjson writes at most 254 levels
    "bigint": b'[{"n": 1' + b"0" * 30 + b"}]",
    "badframe": b'[{"type": "table", "columns": [], "rows": [1]}, {"target": 5, "datapoints": "x"}]',
}


class _GarbageHandler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        server = self.server
        server.requests.append((self.path, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = server.body  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage_sites() -> Iterator[dict[str, ThreadingHTTPServer]]:
    servers = {}
    for site, body in GARBAGE.items():
        server = ThreadingHTTPServer(("127.0.0.1", 0), _GarbageHandler)
        server.body, server.requests = body, []  # type: ignore[attr-defined]
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[site] = server
    yield servers
    for server in servers.values():
        server.shutdown()
        server.server_close()


def remote(site: str, port: int) -> RemoteService:
    return RemoteService(f"{site}@{port}", site, f"http://127.0.0.1:{port}", "127.0.0.1", port, "http", "",
                         (site,), "test", int(time.time() * 1000), 10.0)


class Listed:
    def __init__(self, live: list[RemoteService]) -> None:
        self.live = live

    def services(self) -> list[RemoteService]:
        return list(self.live)

    def expired_services(self) -> list[RemoteService]:
        return []


@pytest.fixture
def far_site(redis_url: str) -> Iterator[int]:
    server = make_server("127.0.0.1", 0, create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "far"}),
                         threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_port
    server.shutdown()


def test_garbage_answers_become_those_sites_errors_and_the_rest_still_answers(
        redis_url, far_site, garbage_sites):
    app = create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "hq"})
    gateway = Gateway("hq", parse_allowed_hosts(["127.0.0.1"]), lambda site: SiteAccess(5.0))
    app.extensions[GATEWAY_KEY] = gateway
    app.extensions[REGISTRY_KEY] = Listed([remote("far", far_site)] + [
        remote(site, server.server_address[1]) for site, server in garbage_sites.items()])
    client = app.test_client()
    try:
        answer = client.get("/v2/replications", query_string={"site": "all"})
        assert answer.status_code == 200, answer.get_data(as_text=True)[:500]
        statuses = {s["site"]: s["status"] for s in answer.get_json()["sites"]}
        assert statuses["far"] == "ok" and statuses["hq"] == "ok"
        assert statuses["nested"] == "error: answer is not JSON"
        assert statuses["deep"] == "error: answer nested deeper than 64 levels"
        assert statuses["bigint"] == "ok"  # read as a float: the merged answer still serialises

        query = {"range": {"from": "2023-11-14T22:00:00Z", "to": "2023-11-14T23:00:00Z"},
                 "targets": [{"target": "replications", "type": "table", "payload": {"site": "all"}}]}
        grafana = client.post("/grafana/query", json=query)
        assert grafana.status_code == 200, grafana.get_data(as_text=True)[:500]
        frames = grafana.get_json()
        assert all(isinstance(row, list) for frame in frames for row in frame.get("rows", []))
    finally:
        gateway.close()


def _config(port: int, extra: str) -> str:
    return ("clusters = a\na.bootstrap.servers = a:1\nservice.site = hq\n"
            f"service.remote.east.url = http://127.0.0.1:{port}\n"
            "service.remote.east.token = s3cret\n" + extra)


@pytest.mark.parametrize("extra, sent", [
    ("", None),  # an open gateway: anyone reaching it would use east's token
    ("service.auth.token = gw\n", "Bearer s3cret"),
    ("service.remote.credentials.without.auth = true\n", "Bearer s3cret"),
])
def test_an_open_gateway_sends_no_stored_credentials(garbage_sites, extra, sent):
    site = garbage_sites["bigint"]
    gateway = Gateway.from_config(parse_config(_config(site.server_address[1], extra)))
    try:
        (answer,) = fan_out(gateway, [remote("east", site.server_address[1])], "/v2/services").sites
    finally:
        gateway.close()
    assert answer.status == "ok"
    assert site.requests == [("/v2/services", sent)]  # type: ignore[attr-defined]


class _SlowHandler(BaseHTTPRequestHandler):
    """What a hostile site does after reading the request: ``server.kind`` says which trick."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        server = self.server
        try:
            if server.kind == "body-drip":  # type: ignore[attr-defined]
                self._head(100_000)
                for _ in range(100_000):
                    self.wfile.write(b"[")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif server.kind == "header-drip":  # type: ignore[attr-defined]
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for byte in b"X-Slow: " + b"a" * 10_000:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
            elif server.kind == "huge-declared":  # type: ignore[attr-defined]
                self._head(100 * 2**20)
                self.wfile.write(b"[" + b"0," * 100_000)
            elif server.kind == "endless":  # type: ignore[attr-defined]
                self._head(None)
                while True:
                    self.wfile.write(b"[0," * 20_000)
            elif server.kind == "gzip":  # type: ignore[attr-defined]
                self._head(20, {"Content-Encoding": "gzip"})
                self.wfile.write(b"\x1f\x8b" + b"\x00" * 18)
        except OSError:
            server.closed_at.append(time.monotonic())  # type: ignore[attr-defined]

    def _head(self, length: int | None, extra: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if length is None:
            self.send_header("Connection", "close")
        else:
            self.send_header("Content-Length", str(length))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


SLOW_KINDS = ("body-drip", "header-drip", "huge-declared", "endless", "gzip")


@pytest.fixture
def hostile_sites() -> Iterator[dict[str, ThreadingHTTPServer]]:
    servers = {}
    for kind in SLOW_KINDS:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
        server.kind, server.closed_at = kind, []  # type: ignore[attr-defined]
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[kind] = server
    yield servers
    for server in servers.values():
        server.shutdown()
        server.server_close()


def test_tarpits_end_at_their_deadline_and_cannot_starve_the_healthy_sites(far_site, hostile_sites):
    services = [remote("far", far_site)] + [remote(kind, server.server_address[1])
                                            for kind, server in hostile_sites.items()]
    timeouts = dict.fromkeys(SLOW_KINDS, 1.0) | {"far": 5.0}
    gateway = Gateway("hq", parse_allowed_hosts(["127.0.0.1"]), lambda site: SiteAccess(timeouts[site]))
    try:
        began = time.monotonic()
        answer = fan_out(gateway, services, "/v2/replications", [("site", "local")])
        took = time.monotonic() - began
        statuses = {a.site: a.status for a in answer.sites}
        assert took < 1.5, f"one fan-out took {took:.1f} s against 1 s deadlines: {statuses}"
        assert statuses == {"far": "ok", "body-drip": "timeout", "header-drip": "timeout",
                            "huge-declared": "error: answer larger than 8388608 bytes",
                            "endless": "error: answer larger than 8388608 bytes",
                            "gzip": "error: compressed answer (gzip) refused"}
        tarpit = hostile_sites["body-drip"]
        while not tarpit.closed_at and time.monotonic() - began < 1.5:  # type: ignore[attr-defined]
            time.sleep(0.05)
        assert tarpit.closed_at, "the tarpit's connection was still open 1.5 s after the call began"  # type: ignore[attr-defined]

        # 40 callers at once: a tarpit ties up only its own 4 threads (the calls waiting for them end at
        # their deadline) and after 3 timeouts in a row it is not called at all.
        answers: list[tuple[float, dict[str, str]]] = []

        def one_caller() -> None:
            started = time.monotonic()
            sites = fan_out(gateway, services, "/v2/replications", [("site", "local")]).sites
            answers.append((time.monotonic() - started, {a.site: a.status for a in sites}))

        callers = [threading.Thread(target=one_caller) for _ in range(40)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(30)
        assert len(answers) == 40
        assert all(statuses["far"] == "ok" for _, statuses in answers), answers
        assert max(took for took, _ in answers) < 5.0 + 0.5
        (_, after) = answers[0], fan_out(gateway, services, "/v2/replications").sites
        breaker = {a.site: a.status for a in after}
        for kind in ("body-drip", "header-drip"):
            assert breaker[kind].startswith("error: not called: "), breaker
    finally:
        gateway.close()
