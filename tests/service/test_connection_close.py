"""A worker closes an answered connection at once when the client sent nothing unread, and keeps
gunicorn's lingering close otherwise (real loopback TCP sockets; the lingering close is recorded)."""

from __future__ import annotations

from gunicorn import util

from service.server import connection_close

ANSWER = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"


def test_nothing_unread_closes_at_once_after_the_whole_answer(connection):
    server, client = connection
    lingered = []
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert server.recv(1024).startswith(b"GET /")
    server.sendall(ANSWER)
    connection_close.prompt_close(lambda *args: lingered.append(args))(server)
    assert server.fileno() == -1 and not lingered  # closed without waiting for the client
    received = b""
    while chunk := client.recv(1024):  # the whole answer, then an orderly end (no reset)
        received += chunk
    assert received == ANSWER


def test_unread_bytes_keep_the_lingering_close(connection):
    server, client = connection
    lingered = []
    client.sendall(b"GET / HTTP/1.1\r\n\r\nGET /pipelined HTTP/1.1\r\n\r\n")
    assert server.recv(18) == b"GET / HTTP/1.1\r\n\r\n"
    server.sendall(ANSWER)
    connection_close.prompt_close(lambda sock, *args: lingered.append(sock))(server)
    assert lingered == [server] and server.fileno() != -1  # the lingering close owns the socket now


def test_a_client_gone_first_is_closed_at_once(connection):
    server, client = connection
    client.close()
    lingered = []
    connection_close.prompt_close(lambda *args: lingered.append(args))(server)
    assert server.fileno() == -1 and not lingered


def test_install_wraps_gunicorns_close_once(monkeypatch):
    original = util.close_graceful
    monkeypatch.setattr(util, "close_graceful", original)
    connection_close.install()
    connection_close.install()
    assert util.close_graceful is not original
    assert util.close_graceful.lingering is original
