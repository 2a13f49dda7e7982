"""A worker sends an answer's head together with its first body bytes (real loopback TCP sockets and
gunicorn's own request parser and Response; the worker's socket is wrapped only to count its sends)."""

from __future__ import annotations

import socket

import pytest
from gunicorn import http
from gunicorn.config import Config
from gunicorn.http import wsgi

from service.server import head_with_body


class CountedSends:
    """The worker's real socket, with its ``sendall`` calls counted."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.sends = sock, 0

    def sendall(self, data: bytes) -> None:
        self.sends += 1
        self.sock.sendall(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.sock, name)


@pytest.fixture(autouse=True)
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wsgi.Response, "write", wsgi.Response.write)  # undone after each test
    head_with_body.install()


def answer(connection: tuple[socket.socket, socket.socket], request: bytes, status: str,
           headers: list[tuple[str, str]], body: list[bytes]) -> tuple[bytes, int]:
    """(bytes the client received, sends the worker made) for one request answered as gunicorn does."""
    server, client = connection
    client.sendall(request)
    cfg = Config()
    sock = CountedSends(server)
    req = next(http.get_parser(cfg, server, ("127.0.0.1", 1)))
    response, _ = wsgi.create(req, sock, ("127.0.0.1", 1), server.getsockname(), cfg)
    response.force_close()
    response.start_response(status, headers)
    for part in body:
        response.write(part)
    response.close()
    server.close()
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received, sock.sends


def test_head_and_body_leave_in_one_send(connection):
    body = b"x" * 20_000
    received, sends = answer(connection, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "200 OK",
                             [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))], [body])
    head, _, rest = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 20000" in head
    assert rest == body and sends == 1


def test_a_head_request_still_gets_its_head(connection):
    received, sends = answer(connection, b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n", "200 OK",
                             [("Content-Type", "text/plain"), ("Content-Length", "2")], [b"ok"])
    assert received.startswith(b"HTTP/1.1 200 OK\r\n") and received.endswith(b"\r\n\r\n") and sends == 1


def test_later_parts_and_chunks_are_sent_as_gunicorn_frames_them(connection):
    received, _ = answer(connection, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "200 OK",
                         [("Content-Type", "text/plain")], [b"one", b"", b"two"])
    head, _, rest = received.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    assert rest == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"


def test_install_wraps_gunicorns_write_once():
    wrapped = wsgi.Response.write
    head_with_body.install()
    assert wsgi.Response.write is wrapped and wrapped.plain is not wrapped
