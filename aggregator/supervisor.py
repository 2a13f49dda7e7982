"""Keeps one rollup query per target cluster running; a failed query restarts alone.

A query that stops with an error (Redis or its Kafka cluster unreachable, a bad batch) is restarted
from its own checkpoint after a back-off, while the queries of the other targets keep running. A
cluster that refuses the aggregator (bad credentials, an untrusted certificate, no permission) is named
in one ERROR (``west: SASL authentication failed (SCRAM-SHA-512): invalid credentials``) and retried
with a doubling back-off, one line per attempt; other failures are retried every ``backoff_s``.

A query can also hang rather than fail (a Redis call without an answer, a stuck source). One whose
current batch has made no progress for ``stall_intervals`` trigger intervals while input is waiting is
restarted: its sink's Redis connections are cut and the query stopped, so the batch fails and is replayed
from the checkpoint by the new query (the sink skips what Redis has). Restarts of queries are counted in
Redis (redis_layout.aggregator_restarts_key) for the service's /metrics; counts Redis did not take yet
(it may be what failed) are kept and written later.

A query whose state is gone from Redis while its checkpoint has progress (Redis flushed or replaced) is
rebuilt from Kafka on a new checkpoint (rebuild), checked every few seconds and before each restart.

Before a target's query first starts in this process, the target's windows still in the Redis layout
before are moved into the current one (window_layout_upgrade); a query whose move Redis failed is not
started yet, and the move is tried again before each later start until it is done.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aggregator import rebuild, window_layout_upgrade
from aggregator.query import RollupQuerySpec, sink_of, start_rollup_query
from aggregator.redis_sink import RedisRollupSink
from clients import redis_connection
from clients.client_faults import classify_java
from clients.retry_backoff import MAX_WAIT_S, RetryBackoff
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

RESTART_BACKOFF_S = 5.0
# The first wait after a cluster refused us (then doubling): a refusal is not fixed by retrying soon.
REFUSED_BACKOFF_S = 10.0
# Trigger intervals a batch may run, with input waiting, before its query counts as stalled: a 200k-record
# batch on a busy machine takes a few intervals, a hung Redis call (without a socket timeout) forever.
STALL_INTERVALS = 30
# The first batch of a query (no progress yet) takes many trigger intervals on a busy machine (JIT,
# connections, the first read): with short triggers, N intervals alone would restart a healthy query.
FIRST_BATCH_GRACE_S = 120.0
# Redis calls of the restart counter: short, so counts wait in memory while Redis hangs.
COUNTER_TIMEOUT_S = 2.0

StartQuery = Callable[[SparkSession, RollupQuerySpec], StreamingQuery]
FindSink = Callable[[SparkSession, StreamingQuery], RedisRollupSink | None]
UpgradeLayout = Callable[[str, str], object]  # (Redis URL, target)


@dataclass
class QuerySupervisor:
    spark: SparkSession
    specs: list[RollupQuerySpec]
    backoff_s: float = RESTART_BACKOFF_S
    refused_backoff_s: float = REFUSED_BACKOFF_S
    start: StartQuery = start_rollup_query
    find_sink: FindSink = sink_of
    queries: dict[str, StreamingQuery] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # query -> why its cluster refuses us
    stall_intervals: int = STALL_INTERVALS
    stalls: dict[str, int] = field(default_factory=dict)  # query -> restarts because it stalled
    counter: RestartCounter | None = None  # None: one writing to each spec's Redis
    state_check: rebuild.RedisStateCheck | None = None  # None: one for `spark` (none without a session)
    rebuilds: dict[str, int] = field(default_factory=dict)  # query -> rebuilds from Kafka
    _rebuilding: dict[str, rebuild.Rebuild] = field(default_factory=dict)  # query -> its rebuild under way
    upgrade_layout: UpgradeLayout = window_layout_upgrade.upgrade_target
    _upgraded: set[str] = field(default_factory=set)  # targets whose old-layout windows are moved
    _progress: dict[str, tuple[object, float]] = field(default_factory=dict)  # query -> (batch, since)
    _stalled: set[str] = field(default_factory=set)  # stalled queries being stopped
    _restart_at: dict[str, float] = field(default_factory=dict)
    _backoffs: dict[tuple[str, bool], RetryBackoff] = field(default_factory=dict)  # (query, refused)

    def start_all(self) -> QuerySupervisor:
        if self.counter is None:
            self.counter = RestartCounter({spec.target: spec.redis_url for spec in self.specs}).start()
        if self.state_check is None and self.spark is not None:
            self.state_check = rebuild.RedisStateCheck(self.spark)
        for spec in self.specs:
            if self._upgrade(spec):
                self.queries[spec.query_name] = self.start(self.spark, spec)
            else:  # started by `check` once the move is done
                self._restart_at[spec.query_name] = time.monotonic() + self.backoff_s
        return self

    def check(self) -> list[str]:
        """Restart the queries that stopped and whose back-off is over; returns their names."""
        restarted = []
        now = time.monotonic()
        for spec in self.specs:
            name = spec.query_name
            query = self.queries.get(name)
            if query is None:  # never started: its layout upgrade is waiting for Redis
                if now >= self._restart_at[name] and self._start(spec, now):
                    restarted.append(name)
                continue
            if name in self._rebuilding or self._state_gone(spec, query, now, at_once=False):
                if self._rebuild(spec, query):
                    restarted.append(name)
                continue
            if query.isActive:
                if name not in self._stalled and self._stalled_for(spec, query, now):
                    self._unstick(spec, query)
                    continue
                if query.lastProgress:  # a batch ran: the cluster takes us again
                    for refused in (True, False):
                        backoff = self._backoffs.pop((name, refused), None)
                        if backoff is not None:
                            backoff.succeeded()
                    self.rejected.pop(name, None)
                continue
            if name in self._stalled:  # stopped by us: restarted at once
                self._stalled.discard(name)
                self._restart_at[name] = now
            if name not in self._restart_at:
                self._restart_at[name] = now + self._failed(spec, query)
            if now >= self._restart_at[name]:
                del self._restart_at[name]
                self._progress.pop(name, None)
                if self._state_gone(spec, query, now, at_once=True):  # e.g. Redis came back empty
                    if self._rebuild(spec, query):
                        restarted.append(name)
                    continue
                if not self._start(spec, now):
                    continue
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self._count(spec.target, "query")
                restarted.append(name)
        return restarted

    def _state_gone(self, spec: RollupQuerySpec, query: StreamingQuery, now: float, at_once: bool) -> bool:
        if self.state_check is None:
            return False
        try:
            return self.state_check.state_gone(spec, query, now, at_once)
        except Exception as exc:  # the checkpoint's file system did not answer: asked again later
            LOG.warning("query %s: could not read its checkpoint: %s", spec.query_name, _first_line(exc))
            return False

    def _rebuild(self, spec: RollupQuerySpec, query: StreamingQuery) -> bool:
        """Rebuilds the query's rollups from Kafka (rebuild); whether it started again. A rebuild that
        failed part-way goes on at the next check from the step that failed: the query is neither restarted
        from its old checkpoint nor rebuilt a second time meanwhile."""
        name = spec.query_name
        assert self.state_check is not None
        if name not in self._rebuilding:
            self._rebuilding[name] = rebuild.Rebuild(spec)
        under_way = self._rebuilding[name]
        try:
            under_way.advance(self.spark, query, self.state_check.client(spec))
        except Exception as exc:
            LOG.warning("query %s: rebuild not done yet: %s", name, _first_line(exc))
            return False
        del self._rebuilding[name]
        # The old query is done with: should the start fail, the next check starts the query anew rather
        # than find the old query's sink still flagging the loss and rebuild again.
        del self.queries[name]
        self._stalled.discard(name)
        self._restart_at.pop(name, None)
        self._progress.pop(name, None)
        self.rebuilds[name] = self.rebuilds.get(name, 0) + 1
        return self._start(spec, time.monotonic())

    def _start(self, spec: RollupQuerySpec, now: float) -> bool:
        """Starts the query again; one Spark refuses (a query it still counts as active: a stop on a side
        thread ends the query a moment before Spark lets its name go) is tried again after the back-off, as
        is one whose layout upgrade Redis failed."""
        if not self._upgrade(spec):
            self._restart_at[spec.query_name] = now + self.backoff_s
            return False
        try:
            self.queries[spec.query_name] = self.start(self.spark, spec)
        except Exception as exc:
            LOG.warning("query %s not started yet: %s", spec.query_name, _first_line(exc))
            self._restart_at[spec.query_name] = now + self.backoff_s
            return False
        return True

    def _upgrade(self, spec: RollupQuerySpec) -> bool:
        """Moves the target's old-layout windows once per process (window_layout_upgrade), before its
        query writes; whether that is done."""
        if spec.target in self._upgraded:
            return True
        try:
            self.upgrade_layout(spec.redis_url, spec.target)
        except redis.RedisError as exc:
            LOG.warning("query %s not started yet: its windows in the Redis layout before were not moved "
                        "(%s); tried again in %.0f s", spec.query_name, _first_line(exc), self.backoff_s)
            return False
        self._upgraded.add(spec.target)
        return True

    def _stalled_for(self, spec: RollupQuerySpec, query: StreamingQuery, now: float) -> bool:
        """Whether the query's current batch, with input waiting, has run for `stall_intervals` triggers."""
        progress = query.lastProgress
        batch = None if not progress else progress.get("batchId")
        seen = self._progress.get(spec.query_name)
        if seen is None or seen[0] != batch:
            self._progress[spec.query_name] = (batch, now)
            return False
        limit = self.stall_intervals * trigger_seconds(spec.trigger_interval)
        if batch is None:  # a query's first batch also starts its Python workers and plans the query
            limit = max(limit, FIRST_BATCH_GRACE_S)
        if now - seen[1] < limit:
            return False
        status = query.status or {}
        return bool(status.get("isTriggerActive") and status.get("isDataAvailable"))

    def _unstick(self, spec: RollupQuerySpec, query: StreamingQuery) -> None:
        """Fails the stalled batch: its sink's Redis connections are cut (a blocked reply read ends at
        once) and the query is stopped on a side thread (a stop waits for the batch, up to Spark's stop
        timeout). The query is restarted by `check` once it has ended."""
        name = spec.query_name
        since = self._progress.pop(name, (None, time.monotonic()))[1]
        LOG.error("query %s made no progress for %.0f s (%d trigger intervals) with input waiting; "
                  "restarting it from its checkpoint", name, time.monotonic() - since, self.stall_intervals)
        self._stalled.add(name)
        self.stalls[name] = self.stalls.get(name, 0) + 1
        sink = self.find_sink(self.spark, query)
        if sink is not None:
            sink.client.connection_pool.disconnect()
        threading.Thread(target=_stop_quietly, args=(name, query), name=f"stop-{name}", daemon=True).start()

    def _count(self, target: str, kind: str, times: int = 1) -> None:
        if self.counter is not None:
            self.counter.add(target, kind, times)

    def _failed(self, spec: RollupQuerySpec, query: StreamingQuery) -> float:
        """Logs why the query stopped (one line) and returns the wait before its restart."""
        error = query.exception()
        text = "" if error is None else str(error)
        fault = classify_java(text, spec.target, spec.kafka_options.get("sasl.mechanism"))
        name = spec.query_name
        if fault is None:
            self.rejected.pop(name, None)
            backoff = self._backoffs.setdefault((name, False), RetryBackoff(
                f"query {name} (restarted from its checkpoint)", LOG, self.backoff_s, self.backoff_s))
            return backoff.failed(f"query {name} stopped: {text.splitlines()[0] if text else 'no error'}")
        self.rejected[name] = fault.message
        backoff = self._backoffs.setdefault((name, True), RetryBackoff(
            f"query {name} (aggregator)", LOG, max(self.backoff_s, self.refused_backoff_s), MAX_WAIT_S))
        return backoff.failed(fault.message)

    def stop_all(self) -> None:
        if self.counter is not None:
            self.counter.stop()
        for name, query in self.queries.items():
            try:
                if query.isActive:
                    query.stop()
            except Exception as exc:  # one query's failed stop must not keep the others
                LOG.warning("query %s ended with an error while stopping: %s", name, type(exc).__name__)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _stop_quietly(name: str, query: StreamingQuery) -> None:
    try:
        query.stop()
    except Exception as exc:
        LOG.warning("stalled query %s did not stop cleanly: %s", name, str(exc).splitlines()[0] if str(exc)
                    else type(exc).__name__)


_INTERVAL = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(milliseconds?|ms|seconds?|s|minutes?)\s*$")
_UNIT_S = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1.0, "second": 1.0,
           "seconds": 1.0, "minute": 60.0, "minutes": 60.0}


def trigger_seconds(interval: str) -> float:
    """`2000 milliseconds` (as query_specs writes a trigger interval) -> 2.0."""
    match = _INTERVAL.fullmatch(interval)
    if match is None:
        raise ValueError(f"not a trigger interval: {interval!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


class RestartCounter:
    """Adds restart counts to each target's Redis hash from a thread of its own: the supervisor's loop
    never waits on Redis, and counts Redis does not take now (it may be what hangs) are written later."""

    def __init__(self, redis_urls: dict[str, str], interval_s: float = 1.0) -> None:
        self.redis_urls, self.interval_s = redis_urls, interval_s
        self._pending: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._clients: dict[str, redis.Redis] = {}
        self._thread = threading.Thread(target=self._run, name="restart-counter", daemon=True)

    def start(self) -> RestartCounter:
        self._thread.start()
        return self

    def add(self, target: str, kind: str, times: int = 1) -> None:
        with self._lock:
            self._pending[(target, kind)] += times

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(COUNTER_TIMEOUT_S + 1)

    def flush(self) -> bool:
        """Writes the pending counts; those Redis did not take stay pending. Whether all were written."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
        failed: Counter[tuple[str, str]] = Counter()
        for (target, kind), times in pending.items():
            try:
                self._client(target).hincrby(layout.aggregator_restarts_key(target), kind, times)
            except Exception as exc:  # one target's Redis may be down or hung; the thread goes on
                LOG.debug("restart count of %s not written yet: %s", target, exc)
                failed[(target, kind)] += times
        with self._lock:
            self._pending.update(failed)
        return not failed

    def _client(self, target: str) -> redis.Redis:
        url = self.redis_urls[target]
        if url not in self._clients:
            self._clients[url] = redis_connection.connect(url, COUNTER_TIMEOUT_S, COUNTER_TIMEOUT_S)
        return self._clients[url]

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.flush()
        self.flush()
