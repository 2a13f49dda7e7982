"""The streaming query's window merges, in a child process of their own, one batch behind the query.

A sink hands each committed batch's id to a BackgroundWindowWriter; its child process merges the batch's
staged copy (window_writer.WindowWriter.merge_staged) while Spark reads the next batch. A process, not a
thread: merging is mostly Python, and a thread would hold the GIL the next batch's parsing needs.

A merge costs per series it touches, so batches that come quickly (under BATCH_GAP_S apart: a query with
a short trigger, under load) are merged together, up to MERGE_INTERVAL_S after the last merge, and a
child that falls behind catches up in fewer, larger merges. Batches further apart (the default trigger, a
backlog's) are merged as they come: waiting would only delay their windows. A sink that needs Redis to
hold every batch handed over (wait_idle), or a child too far behind, has the child merge at once.

The child runs at the query's CPU priority. Tried at nice +10 (so that the batch in flight goes first on a
busy machine), a stopping aggregator could no longer count on its last merge: under load the child got a
sliver of a core and was cut off at the stop deadline (tests/e2e/test_stop_time.py failed in CI), and an
unprivileged process cannot raise its priority back when asked to finish.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection

import pyarrow as pa

from aggregator import sink_children
from aggregator.window_writer import WindowWriter
from clients import redis_connection

LOG = logging.getLogger(__name__)
# A merge costs per series it touches, whatever the batch's size: batches a live query commits quickly
# are merged together, up to this long after the last merge, so windows trail latest values by up to this
# much more (half the finest window, 10 s). Merging less often costs the merge child and Redis less CPU,
# which the latest values' freshness gains (bench/RESULTS.md, "MERGE_INTERVAL_S").
MERGE_INTERVAL_S = 5.0
# Batches that come further apart than this are merged as they come: a query at the default 2 s trigger
# (aggregator.trigger.interval.ms), a backlog's (seconds apart at 200k records a batch), whose windows
# seldom overlap and whose last batch would wait for nothing. A
# query triggered more often than that, for fresher latest values, gets its windows merged together.
BATCH_GAP_S = 1.5
# Sent instead of a batch id: merge what was handed over now, without waiting for the interval.
FLUSH = "flush"
CHILD_PREFIX = "srm-windows-"
# A child answers each batch within a merge (a few seconds) or, when Redis hangs, once its socket timeout
# (redis.socket.timeout.ms, 10 s per call, a few calls per merge) fails the merge. One silent for longer
# is stuck (stopped, deadlocked): it is killed and a new child merges what it left staged.
ANSWER_TIMEOUT_S = 90.0

# Merge children restarted because they stopped answering, per query name; the supervisor takes them
# (take_child_restarts) and counts them in Redis for /metrics.
_CHILD_RESTARTS: Counter[str] = Counter()
_CHILD_RESTARTS_LOCK = threading.Lock()


def take_child_restarts() -> dict[str, int]:
    """The merge-child restarts since the last call, per query name."""
    with _CHILD_RESTARTS_LOCK:
        taken = dict(_CHILD_RESTARTS)
        _CHILD_RESTARTS.clear()
    return taken


class BackgroundWindowWriter:
    """Merges staged batches in a child process, in the order submitted, a few batches behind at most.

    A child that leaves a batch unanswered for `answer_timeout_s` is killed and replaced: the new child
    merges every batch staged up to the last one submitted (recover), and the applied batch id, WATCHed by
    each merge, keeps a merge the old child had already sent to Redis from being applied twice."""

    # Staged batches waiting: a live query's batches come a fraction of a second apart at the quickest,
    # so a merge interval holds a dozen or more of them. More (a child that fell behind) and the query
    # waits for a merge, asked at once.
    MAX_BEHIND = 64

    def __init__(self, redis_url: str, scope: str, committed: int | None,
                 answer_timeout_s: float | None = None) -> None:
        self.scope = scope
        self.redis_url = redis_url
        self.answer_timeout_s = ANSWER_TIMEOUT_S if answer_timeout_s is None else answer_timeout_s
        self.restarts = 0
        self._last_submitted = committed
        self._failure: str | None = None
        self._start_child(committed)

    def _start_child(self, committed: int | None) -> None:
        self._conn, self._process = sink_children.spawn(self, _serve, (self.redis_url, self.scope, committed),
                                                        f"{CHILD_PREFIX}{self.scope}")
        self._pending = 1  # the recovery of what a crash left staged
        self._waiting_since = time.monotonic()  # the last answer, or the first request after none pending

    def submit(self, batch_id: int, windows: pa.Table) -> None:  # the child reads the staged copy
        self.raise_failure()
        self._merged_down_to(self.MAX_BEHIND - 1)
        if not self._pending:
            self._waiting_since = time.monotonic()
        self._conn.send(batch_id)
        self._pending += 1
        self._last_submitted = batch_id

    def wait_idle(self) -> None:
        self._merged_down_to(0)
        self.raise_failure()

    def _merged_down_to(self, most: int) -> None:
        """Waits until at most `most` batches are pending, the child asked to merge at once (FLUSH)."""
        if self._pending > most:
            self._conn.send(FLUSH)
        while self._pending > most:
            self._receive()

    def raise_failure(self) -> None:
        while self._pending and self._conn.poll():
            self._receive()
        if self._pending and time.monotonic() - self._waiting_since > self.answer_timeout_s:
            self._replace_child()
        if self._failure is not None:
            raise RuntimeError(f"{self.scope}: merging windows failed ({self._failure}); the staged batches "
                               "are merged when the query restarts")

    def close(self, wait_s: float = 0.0) -> None:
        """The child ends once its merge in progress is done (waited for up to `wait_s`); batches still
        staged are merged by the next writer of the query (recover)."""
        self._conn.close()
        if wait_s > 0:
            self._process.join(wait_s)

    def _receive(self) -> None:
        wait_s = self._waiting_since + self.answer_timeout_s - time.monotonic()
        if not self._conn.poll(max(0.0, wait_s)):
            self._replace_child()
            return
        try:
            failure = self._conn.recv()
            self._pending -= 1
            self._waiting_since = time.monotonic()
        except EOFError:
            self._process.join(10)
            failure = f"the window writer process exited with {self._process.exitcode}"
            self._pending = 0
        if failure is not None:
            self._failure = self._failure or failure

    def _replace_child(self) -> None:
        LOG.error("%s: the window writer process (pid %s) did not answer for %.0f s with %d batch(es) "
                  "pending; killing it and starting another, which merges what it left staged", self.scope,
                  self._process.pid, time.monotonic() - self._waiting_since, self._pending)
        self._conn.close()
        self._process.kill()  # SIGKILL: a stopped process takes no other signal
        self._process.join(10)
        self.restarts += 1
        with _CHILD_RESTARTS_LOCK:
            _CHILD_RESTARTS[self.scope.split(":", 1)[0]] += 1
        # Every batch submitted was committed (staged) before it was submitted.
        self._start_child(self._last_submitted)


def join_window_writers(timeout_s: float) -> list[str]:
    """Waits up to `timeout_s` for the merge children whose query ended (they finish the batches they
    were handed, then exit); returns the names of those still running."""
    deadline = time.monotonic() + timeout_s
    children = [c for c in multiprocessing.active_children() if c.name.startswith(CHILD_PREFIX)]
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    return [c.name for c in children if c.is_alive()]


def _serve(redis_url: str, scope: str, committed: int | None, conn: Connection, level: int) -> None:
    """The child: recover, then merge the submitted batches from their staged copies, those that come
    quickly together (_submitted); answer each with None or what failed. After a
    failure nothing more is merged (later batches build on it): the query restarts."""
    sink_children.in_child(level)  # not ended by a stop signal between a committed batch and its merge
    writer = WindowWriter(redis_connection.connect(redis_url), scope)
    failure = _attempt(lambda: writer.recover(committed))
    last_merge, last_arrival = 0.0, None
    try:
        conn.send(failure)
        while True:
            batch_ids, ended, last_arrival = _submitted(conn, last_merge, last_arrival)
            last_merge = time.monotonic()
            if batch_ids and failure is None:
                failure = _attempt(lambda: writer.merge_staged(batch_ids))  # noqa: B023 (called at once)
            if ended:
                return
            for _ in batch_ids:
                conn.send(failure)
    except OSError:  # the parent closed its end (the query ended) or died
        return


def _submitted(conn: Connection, last_merge: float, last_arrival: float | None
               ) -> tuple[list[int], bool, float | None]:
    """The next batch ids submitted, with those already waiting and, when they come quickly (under
    BATCH_GAP_S after the one before), more until MERGE_INTERVAL_S after `last_merge` or a FLUSH. Also
    whether the parent is gone, and when the last one came. A FLUSH with nothing submitted (what it asked
    for was merged meanwhile) is not waited on."""
    batch_ids: list[int] = []
    try:
        while not batch_ids:
            message = conn.recv()
            if message != FLUSH:
                batch_ids.append(message)
        now = time.monotonic()
        quick = last_arrival is not None and now - last_arrival < BATCH_GAP_S
        last_arrival = now
        not_before = last_merge + MERGE_INTERVAL_S if quick else now
        while conn.poll(max(0.0, not_before - time.monotonic())):
            message = conn.recv()
            if message == FLUSH:
                break
            batch_ids.append(message)
            last_arrival = time.monotonic()
    except EOFError:
        return batch_ids, True, last_arrival
    return batch_ids, False, last_arrival


def _attempt(work: Callable[[], None]) -> str | None:
    try:
        work()
    except Exception as exc:
        LOG.exception("%s", exc)
        return f"{type(exc).__name__}: {exc}"
    return None
