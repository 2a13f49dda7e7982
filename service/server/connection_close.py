"""How a gunicorn worker of this service closes a client connection once the answer is sent.

gunicorn (from 26) always closes with RFC 9112 §9.6's lingering close: half-close, then wait until the
client closes too. That wait matters only when the client sent bytes the worker never read (a
pipelined request, an unread body), which a close would answer with a reset that can cut the end of
the answer. This service's clients send one GET per connection, so the wait is a full round trip to
the client per request, during which a sync worker serves nobody: under load, a tenth of the
throughput. Here a connection with nothing unread closes at once (FIN after the whole answer, as
gunicorn did before 26); one with unread bytes still gets gunicorn's lingering close.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable

from gunicorn import util

LingeringClose = Callable[..., None]


def prompt_close(lingering: LingeringClose) -> LingeringClose:
    def close(sock: socket.socket, *args: object, **kwargs: object) -> None:
        if isinstance(sock, ssl.SSLSocket) or _has_unread(sock):
            lingering(sock, *args, **kwargs)
            return
        try:
            sock.close()
        except OSError:
            pass

    close.lingering = lingering  # type: ignore[attr-defined]
    return close


def _has_unread(sock: socket.socket) -> bool:
    """Bytes the client sent that nobody read (an end of stream is not one). The socket is left
    non-blocking: it is about to be closed, and the lingering close sets its own timeout."""
    try:
        sock.setblocking(False)  # a Python socket with a timeout would wait for data, even when peeking
        return bool(sock.recv(1, socket.MSG_PEEK))
    except OSError:  # nothing to read (BlockingIOError), or reset or gone: nothing left to protect
        return False


def install() -> None:
    """In a worker process (after the fork): gunicorn's workers call ``util.close_graceful``."""
    lingering = getattr(util, "close_graceful", None)
    if lingering is not None and not hasattr(lingering, "lingering"):
        util.close_graceful = prompt_close(lingering)
