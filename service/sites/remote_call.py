"""One HTTP call to a remote site, with a total deadline, a body-size cap and no decompression.

urllib3's read timeout applies to each socket read, so a site dripping one byte every 0.8 s kept a call
alive for as long as it liked against a 2 s timeout. Here every call carries an absolute deadline: the
sockets it uses are registered with one reaper thread, which shuts them down when the deadline passes,
so a blocked read (headers, body or TLS handshake) returns at once and the call ends as ``timeout``.
The reaper holds a duplicate of each socket's descriptor until the call is over, so it can never shut a
socket that was closed and reused by someone else in the meantime, and a connection that goes back to
the pool is released by the call first.

The body is read in chunks up to ``max_body_bytes`` (a larger ``Content-Length`` is refused before
reading), compressed answers are refused (no decompression bombs), and the call connects to the address
the caller checked (``site_trust.Resolver``) with the site's name in ``Host`` and, over TLS, in SNI and
certificate checks: there is no second lookup that DNS could answer differently.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HTTPError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from service.sites.site_trust import Endpoint

# urllib3 logs a traceback at WARNING for every answer whose headers it cannot parse (a site cut off at
# its deadline mid-headers, or any hostile site): that is the site's status here, not a log line per call.
logging.getLogger("urllib3.connection").setLevel(logging.ERROR)

TIMEOUT: Final = "timeout"
READ_CHUNK: Final = 65_536
POOLS: Final = 64
MAX_ANSWER_DEPTH: Final = 64  # real answers are a few levels deep; orjson writes at most 254
MAX_ANSWER_VALUES: Final = 200_000  # scalars and containers; a 1 MiB answer of real objects holds fewer


class CallFailed(Exception):
    """A call that produced no usable HTTP answer; ``status`` is the site's status (``timeout`` or
    ``error: …``), ``breaks`` whether it counts towards the site's circuit breaker (slow or unreachable,
    not merely wrong)."""

    def __init__(self, status: str, breaks: bool) -> None:
        super().__init__(status)
        self.status, self.breaks = status, breaks


@dataclass(frozen=True)
class Reply:
    status: int
    data: bytes


def parse_answer(data: bytes) -> tuple[Any, bool]:
    """(body, is_json) of an answer, or CallFailed for one nested deeper than ``MAX_ANSWER_DEPTH`` or
    holding more than ``MAX_ANSWER_VALUES`` values.

    orjson: nesting beyond 1024 is a parse error (``json`` raised RecursionError), NaN is refused and
    integers beyond 64 bits come back as floats. orjson writes at most 254 levels, though, and the
    merged answer wraps each body in two more: a parsed body nested 300 deep made the answer a 500.
    The value count bounds what one answer costs after parsing: every value of a list answer becomes
    an object of the merged answer, so an 8 MiB ``[0,0,…]`` cost a gigabyte.
    """
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, False
    problem = _shape_problem(body, MAX_ANSWER_DEPTH, MAX_ANSWER_VALUES)
    if problem is not None:
        raise CallFailed(f"error: {problem}", breaks=False)
    return body, True


def _shape_problem(value: Any, max_depth: int, max_values: int) -> str | None:
    pending, values = [(value, 1)], 1
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                return f"answer nested deeper than {max_depth} levels"
            values += len(item)
            if values > max_values:
                return f"answer has more than {max_values} values"
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return None


@dataclass(eq=False)
class _Call:
    deadline: float  # time.monotonic()
    expired: bool = False
    finished: bool = False
    _sockets: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, sock: socket.socket) -> None:
        duplicate = socket.fromfd(sock.fileno(), sock.family, sock.type)
        with self._lock:
            if not self.finished:
                self._sockets.append(duplicate)
                if self.expired:
                    _shut(duplicate)
                return
        duplicate.close()

    def expire(self) -> None:
        with self._lock:
            if self.finished:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def finish(self) -> bool:
        """Ends the reaper's hold on this call's sockets; True when the deadline had passed."""
        with self._lock:
            self.finished = True
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()
            return self.expired


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class DeadlineReaper:
    """One daemon thread per process expiring calls at their deadlines (started lazily, so a gunicorn
    worker that forked gets its own)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Call]] = []
        self._sequence = itertools.count()
        self._wake = threading.Condition()
        self._pid: int | None = None

    def add(self, call: _Call) -> None:
        with self._wake:
            if self._pid != os.getpid():
                self._pid, self._heap = os.getpid(), []
                threading.Thread(target=self._run, name="srm-gateway-deadlines", daemon=True).start()
            heapq.heappush(self._heap, (call.deadline, next(self._sequence), call))
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                deadline, _, call = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
            call.expire()


REAPER: Final = DeadlineReaper()
_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("srm_remote_call", default=None)


def _watch(sock: socket.socket | None) -> None:
    call = _CURRENT.get()
    if call is not None and sock is not None:
        call.watch(sock)


class _DeadlineHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _watch(sock)  # before TLS: the handshake is under the deadline too
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch(self.sock)  # a pooled connection, already open
        super().request(*args, **kwargs)


class _DeadlineHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _watch(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch(self.sock)
        super().request(*args, **kwargs)


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _DeadlineHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


class RemoteClient:
    """Connection pools for the gateway's calls; thread-safe."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        # urllib3 directly: no proxy or netrc settings from the environment, no retries, no redirects.
        self.http = urllib3.PoolManager(num_pools=POOLS, maxsize=4, retries=False)
        self.http.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def call(self, endpoint: Endpoint, address: str, path: str, headers: dict[str, str],
             body: bytes | None, deadline: float, timeout_s: float) -> Reply:
        """``path`` (with its query) under ``endpoint``'s root, on ``address``; Reply or CallFailed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:  # waited in the queue past its deadline: not worth connecting
            raise CallFailed(TIMEOUT, breaks=False)
        call = _Call(deadline)
        REAPER.add(call)
        token = _CURRENT.set(call)
        try:
            return self._exchange(call, endpoint, address, path, headers, body, min(timeout_s, remaining))
        finally:
            _CURRENT.reset(token)
            call.finish()

    def _exchange(self, call: _Call, endpoint: Endpoint, address: str, path: str, headers: dict[str, str],
                  body: bytes | None, timeout_s: float) -> Reply:
        tls = {"server_hostname": endpoint.host, "assert_hostname": endpoint.host} \
            if endpoint.scheme == "https" else {}
        pool = self.http.connection_from_host(address, endpoint.port, endpoint.scheme, pool_kwargs=tls)
        try:
            response = pool.urlopen("POST" if body is not None else "GET", endpoint.root_path + path,
                                    body=body, headers={**headers, "Host": endpoint.authority},
                                    timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
                                    retries=False, redirect=False, assert_same_host=False,
                                    preload_content=False, decode_content=False, release_conn=False)
        except NewConnectionError as exc:  # before ConnectTimeoutError: urllib3 makes it a subclass
            raise _timeout_if(call) or CallFailed("error: cannot connect", breaks=True) from exc
        except (HTTPError, OSError) as exc:
            raise _failure(call, exc) from exc
        reusable = False
        try:
            data = self._body(response)
            reusable = True
        except CallFailed:
            raise
        except (HTTPError, OSError) as exc:
            raise _failure(call, exc) from exc
        finally:
            # The reaper lets go of this call's sockets before the connection may serve another call.
            if call.finish() or not reusable:
                response.close()
            response.release_conn()
        if call.expired:  # the reaper cut the body short: what was read is no answer
            raise CallFailed(TIMEOUT, breaks=True)
        return Reply(response.status, data)

    def _body(self, response: urllib3.BaseHTTPResponse) -> bytes:
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise CallFailed(f"error: compressed answer ({encoding[:20]}) refused", breaks=False)
        length = response.headers.get("Content-Length", "").strip()
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise CallFailed(f"error: answer larger than {self.max_body_bytes} bytes", breaks=False)
        chunks, size = [], 0
        while chunk := response.read1(READ_CHUNK, decode_content=False):
            size += len(chunk)
            if size > self.max_body_bytes:
                raise CallFailed(f"error: answer larger than {self.max_body_bytes} bytes", breaks=False)
            chunks.append(chunk)
        return b"".join(chunks)

    def clear(self) -> None:
        self.http.clear()


def _timeout_if(call: _Call) -> CallFailed | None:
    return CallFailed(TIMEOUT, breaks=True) if call.expired else None


def _failure(call: _Call, exc: Exception) -> CallFailed:
    """A transport failure: past the deadline or a socket timeout is ``timeout``, anything else is named."""
    if call.expired or isinstance(exc, Urllib3Timeout | TimeoutError):
        return CallFailed(TIMEOUT, breaks=True)
    return CallFailed(f"error: {type(exc).__name__}", breaks=True)
