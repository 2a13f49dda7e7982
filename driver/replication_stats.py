"""Turns the replication's per-partition counters into raw-metrics records, once per `metrics.period`.

Counters are deltas since the last report (MM2's record-count/byte-count, made per period); latency
and age are summarised per period; offsets and lag are the latest levels seen. A partition's first
report after a task start also counts what a crashed worker copied and never reported
(``driver.count_recovery``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from contract.records.raw_metrics import LatencySummary, PartitionMetrics, ReaderHealth, ReplicationMetrics
from contract.status import DriverStatus

INFINITY = float("inf")


@dataclass
class PartitionStats:
    """One partition's counters of the period. Latency and age are kept as running min, max and sum
    (called once a copied record: no list of samples to grow, sample or summarise)."""

    remote_topic: str
    upstream_topic: str
    partition: int
    record_count: int = 0
    byte_count: int = 0
    polled_count: int = 0
    last_latency: float = 0.0
    latency_min: float = INFINITY
    latency_max: float = -INFINITY
    latency_sum: float = 0.0
    last_age: float = 0.0
    age_min: float = INFINITY
    age_max: float = -INFINITY
    age_sum: float = 0.0
    upstream_offset: int | None = None  # last replicated
    recovered_count: int = 0  # copied by an earlier worker that died before reporting them
    target_offset: int | None = None
    source_end_offset: int | None = None

    def polled(self, age_ms: float) -> None:
        """A record was read from the source (MM2 measures record age at poll time)."""
        self.polled_count += 1
        self.last_age = age_ms
        self.age_sum += age_ms
        if age_ms < self.age_min:
            self.age_min = age_ms
        if age_ms > self.age_max:
            self.age_max = age_ms

    def polled_run(self, count: int, age_sum: float, age_min: float, age_max: float, age_last: float) -> None:
        """``count`` records read from the source at once, their ages summed up."""
        self.polled_count += count
        self.last_age = age_last
        self.age_sum += age_sum
        if age_min < self.age_min:
            self.age_min = age_min
        if age_max > self.age_max:
            self.age_max = age_max

    def replicated_run(self, upstream_offset: int, target_offset: int, count: int, size: int,
                       latency_sum: float, latency_min: float, latency_max: float,
                       latency_last: float) -> None:
        """``count`` records acknowledged at once, up to ``upstream_offset``; `size`: their values' length."""
        self.record_count += count
        self.byte_count += size
        self.upstream_offset = upstream_offset
        self.target_offset = target_offset
        self.last_latency = latency_last
        self.latency_sum += latency_sum
        if latency_min < self.latency_min:
            self.latency_min = latency_min
        if latency_max > self.latency_max:
            self.latency_max = latency_max

    def records_lag(self) -> int | None:
        if self.source_end_offset is None:
            return None
        next_offset = 0 if self.upstream_offset is None else self.upstream_offset + 1
        return max(0, self.source_end_offset - next_offset)

    def report(self, ts: int, period_ms: int, source: str, target: str) -> PartitionMetrics:
        latency = (LatencySummary(self.latency_min, self.latency_max, self.latency_sum / self.record_count,
                                  self.last_latency, self.record_count) if self.record_count else None)
        age = (LatencySummary(self.age_min, self.age_max, self.age_sum / self.polled_count, self.last_age,
                              self.polled_count) if self.polled_count else None)
        record = PartitionMetrics(
            ts=ts, period_ms=period_ms, source=source, target=target, topic=self.remote_topic,
            upstream_topic=self.upstream_topic, partition=self.partition,
            record_count=self.record_count + self.recovered_count, byte_count=self.byte_count,
            replication_latency_ms=latency, record_age_ms=age, records_lag=self.records_lag(),
            source_end_offset=self.source_end_offset, upstream_offset=self.upstream_offset,
            target_offset=self.target_offset)
        self.record_count = self.byte_count = self.polled_count = self.recovered_count = 0
        self.latency_min = self.age_min = INFINITY
        self.latency_max = self.age_max = -INFINITY
        self.latency_sum = self.age_sum = 0.0
        return record


class ReplicationStats:
    """Thread-safe counters of one replication: the worker writes, the reporter drains."""

    def __init__(self, source: str, target: str,
                 readers: Callable[[], dict[str, ReaderHealth] | None] = lambda: None) -> None:
        self.source, self.target, self.readers = source, target, readers
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], PartitionStats] = {}
        self._last_report = time.time()
        self.status: str = DriverStatus.RUNNING
        self.error: str | None = None
        self.topics_replicated = 0
        self.workers = 1
        self.tasks = 1

    def partition(self, upstream_topic: str, partition: int, remote_topic: str) -> PartitionStats:
        key = (upstream_topic, partition)
        with self._lock:
            stats = self._partitions.get(key)
            if stats is None:
                stats = self._partitions[key] = PartitionStats(remote_topic, upstream_topic, partition)
            return stats

    def forget(self, keep: set[tuple[str, int]]) -> None:
        """Drop partitions no longer assigned to this worker, so they are not reported twice."""
        with self._lock:
            for key in set(self._partitions) - keep:
                del self._partitions[key]

    def retire(self, keys: set[tuple[str, int]], now: float | None = None) -> list[PartitionMetrics]:
        """Final reports of partitions leaving this worker (their counts since the last report would
        otherwise be lost), after which they are no longer reported."""
        now = time.time() if now is None else now
        ts, period_ms = int(now * 1000), int((now - self._last_report) * 1000)
        with self._lock:
            leaving = [self._partitions.pop(key) for key in keys if key in self._partitions]
        return [stats.report(ts, period_ms, self.source, self.target) for stats in leaving
                if stats.record_count or stats.polled_count or stats.recovered_count]

    def drain(self, now: float | None = None) -> list[PartitionMetrics | ReplicationMetrics]:
        now = time.time() if now is None else now
        ts, period_ms = int(now * 1000), int((now - self._last_report) * 1000)
        self._last_report = now
        with self._lock:
            records: list[PartitionMetrics | ReplicationMetrics] = [
                s.report(ts, period_ms, self.source, self.target) for s in self._partitions.values()]
        records.append(ReplicationMetrics(
            ts=ts, period_ms=period_ms, source=self.source, target=self.target, status=self.status,
            error=self.error, workers=self.workers, tasks=self.tasks,
            topics_replicated=self.topics_replicated, readers=self.readers()))
        return records
