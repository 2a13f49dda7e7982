"""Keeps one rollup query per target cluster running; a failed query restarts alone.

A query that stops with an error (Redis or its Kafka cluster unreachable, a bad batch) is restarted
from its own checkpoint after a back-off, while the queries of the other targets keep running.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from aggregator.query import RollupQuerySpec, start_rollup_query

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
    _failed_at: dict[str, float] = field(default_factory=dict)

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
                continue
            if name not in self._failed_at:
                LOG.error("query %s stopped: %s; restarting it from its checkpoint in %.0f s", name,
                          query.exception(), self.backoff_s)
                self._failed_at[name] = now
            if now - self._failed_at[name] >= self.backoff_s:
                del self._failed_at[name]
                self.queries[name] = self.start(self.spark, spec)
                self.restarts[name] = self.restarts.get(name, 0) + 1
                restarted.append(name)
        return restarted

    def stop_all(self) -> None:
        for name, query in self.queries.items():
            try:
                if query.isActive:
                    query.stop()
            except Exception as exc:  # noqa: PERF203 (one query's failed stop must not keep the others)
                LOG.warning("query %s ended with an error while stopping: %s", name, type(exc).__name__)
