"""Keeps one rollup query per target cluster running; a failed query restarts alone.

A query that stops with an error (Redis or its Kafka cluster unreachable, a bad batch) is restarted
from its own checkpoint after a back-off, while the queries of the other targets keep running. A
cluster that refuses the aggregator (bad credentials, an untrusted certificate, no permission) is named
in one ERROR (``west: SASL authentication failed (SCRAM-SHA-512): invalid credentials``) and retried
with a doubling back-off, one line per attempt; other failures are retried every ``backoff_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aggregator.query import RollupQuerySpec, start_rollup_query
from contract.client_faults import classify_java
from contract.retry_backoff import MAX_WAIT_S, RetryBackoff

LOG = logging.getLogger(__name__)

RESTART_BACKOFF_S = 5.0

StartQuery = Callable[[SparkSession, RollupQuerySpec], StreamingQuery]


@dataclass
class QuerySupervisor:
    spark: SparkSession
    specs: list[RollupQuerySpec]
    backoff_s: float = RESTART_BACKOFF_S
    start: StartQuery = start_rollup_query
    queries: dict[str, StreamingQuery] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # query -> why its cluster refuses us
    _restart_at: dict[str, float] = field(default_factory=dict)
    _backoffs: dict[tuple[str, bool], RetryBackoff] = field(default_factory=dict)  # (query, refused)

    def start_all(self) -> QuerySupervisor:
        for spec in self.specs:
            self.queries[spec.query_name] = self.start(self.spark, spec)
        return self

    def check(self) -> list[str]:
        """Restart the queries that stopped and whose back-off is over; returns their names."""
        restarted = []
        now = time.monotonic()
        for spec in self.specs:
            name = spec.query_name
            query = self.queries[name]
            if query.isActive:
                if query.lastProgress:  # a batch ran: the cluster takes us again
                    for refused in (True, False):
                        backoff = self._backoffs.pop((name, refused), None)
                        if backoff is not None:
                            backoff.succeeded()
                    self.rejected.pop(name, None)
                continue
            if name not in self._restart_at:
                self._restart_at[name] = now + self._failed(spec, query)
            if now >= self._restart_at[name]:
                del self._restart_at[name]
                self.queries[name] = self.start(self.spark, spec)
                self.restarts[name] = self.restarts.get(name, 0) + 1
                restarted.append(name)
        return restarted

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
            f"query {name} (aggregator)", LOG, max(self.backoff_s, 10.0), MAX_WAIT_S))
        return backoff.failed(fault.message)

    def stop_all(self) -> None:
        for name, query in self.queries.items():
            try:
                if query.isActive:
                    query.stop()
            except Exception as exc:  # noqa: PERF203 (one query's failed stop must not keep the others)
                LOG.warning("query %s ended with an error while stopping: %s", name, type(exc).__name__)
