"""Hostile HTTP sites for the gateway tests: garbage answers, tarpits, oversized and compressed bodies.

Each server records what it received (``requests``: path and Authorization) or when its connection was
cut (``closed_at``), so a test can tell what left the gateway and when the gateway let go.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Generic, TypeVar

from werkzeug.serving import make_server

from service.app import create_app
from service.sites.registry import RemoteService

GARBAGE = {
    "nested": b"[" * 100_000,
    "deep": b"[" * 300 + b"]" * 300,  # parses, but orjson writes at most 254 levels
    "bigint": b'[{"n": 1' + b"0" * 30 + b"}]",
    "badframe": b'[{"type": "table", "columns": [], "rows": [1]}, {"target": 5, "datapoints": "x"}]',
}

Seen = TypeVar("Seen")


class RecordingServer(ThreadingHTTPServer, Generic[Seen]):
    """A loopback HTTP server whose handler appends what each request carried to ``requests``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.requests: list[Seen] = []


class HostileServer(RecordingServer[tuple[str, str | None]]):
    """Plays one trick (``kind``, serving ``body``); ``requests`` holds path and Authorization, and
    ``closed_at`` when the connection was cut."""

    daemon_threads = True

    def __init__(self, handler: type[HostileHandler], kind: str, body: bytes) -> None:
        super().__init__(handler)
        self.kind, self.body = kind, body
        self.closed_at: list[float] = []


class HostileHandler(BaseHTTPRequestHandler):
    server: HostileServer

    def log_message(self, *args: object) -> None:
        pass


class GarbageHandler(HostileHandler):
    def _answer(self) -> None:
        server = self.server
        server.requests.append((self.path, self.headers.get("Authorization")))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = server.body
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # http.server's names


class SlowHandler(HostileHandler):
    """What a hostile site does after reading the request: ``server.kind`` says which trick."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # http.server's name
        server = self.server
        try:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if server.kind == "body-drip":
                self._head(100_000)
                for _ in range(100_000):
                    self.wfile.write(b"[")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif server.kind == "header-drip":
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for byte in b"X-Slow: " + b"a" * 10_000:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
            elif server.kind == "huge-declared":
                self._head(100 * 2**20)
                self.wfile.write(b"[" + b"0," * 100_000)
            elif server.kind == "endless":
                self._head(None)
                while True:
                    self.wfile.write(b"[0," * 20_000)
            elif server.kind == "gzip":
                self._head(20, {"Content-Encoding": "gzip"})
                self.wfile.write(b"\x1f\x8b" + b"\x00" * 18)
        except OSError:
            server.closed_at.append(time.monotonic())

    do_POST = do_GET  # http.server's name

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


SLOW_KINDS = ("body-drip", "header-drip", "huge-declared", "endless", "gzip")


@contextmanager
def serving(handler: type[HostileHandler],
            kinds: Mapping[str, bytes | None]) -> Iterator[dict[str, HostileServer]]:
    """One server per kind, serving its body (a tarpit's kind needs none)."""
    servers = {}
    for kind, body in kinds.items():
        server = HostileServer(handler, kind, body or b"")
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[kind] = server
    try:
        yield servers
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


@contextmanager
def far_site_serving(redis_url: str) -> Iterator[int]:
    """A real, healthy site: the app over the test Redis, on a loopback port."""
    server = make_server("127.0.0.1", 0, create_app({"REDIS_URL": redis_url, "SERVICE_SITE": "far"}),
                         threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()


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
