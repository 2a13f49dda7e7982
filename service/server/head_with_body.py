"""How a gunicorn worker of this service sends an answer: its head and the first body bytes in one send.

gunicorn writes the status line and headers with one ``sendall`` and the body with another, and its
listening socket sets TCP_NODELAY, so every answer leaves as two TCP segments: twice the loopback or
network stack, and the client wakes twice. A Flask answer is one ready block of bytes, so here the head
waits for the first body bytes and both go out in one ``sendall`` (one copy of the head in front of the
body). gunicorn keeps all its framing and bookkeeping (Content-Length clipping, chunks, bodies a HEAD or
a 204 must not carry): only the socket it writes to holds the head back until the body comes, or until
the write returns, so nothing ever stays unsent.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable

from gunicorn.http import wsgi

Write = Callable[[wsgi.Response, bytes], None]


class HeldHead:
    """A socket for one ``Response.write``: the first ``sendall`` (the head) waits for the next one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.head: bytes | None = None

    def sendall(self, data: bytes) -> None:
        if self.head is None:
            self.head = data
            return
        head, self.head = self.head, b""
        self.sock.sendall(head + data if head else data)

    def flush(self) -> None:
        """The head alone, when the write sent no body (one a HEAD request or a 204 must not carry)."""
        if self.head:
            self.sock.sendall(self.head)
        self.head = b""


def head_with_body(write: Write) -> Write:
    def first_write(response: wsgi.Response, data: bytes) -> None:
        if response.headers_sent or not data or isinstance(response.sock, ssl.SSLSocket):
            write(response, data)
            return
        held = HeldHead(response.sock)
        response.sock = held
        try:
            write(response, data)
        finally:
            response.sock = held.sock
        held.flush()

    first_write.plain = write  # type: ignore[attr-defined]
    return first_write


def install() -> None:
    """In a worker process (after the fork), before it answers anything."""
    if not hasattr(wsgi.Response.write, "plain"):
        wsgi.Response.write = head_with_body(wsgi.Response.write)
