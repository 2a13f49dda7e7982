"""Turns the replication's per-partition counters into raw-metrics records, once per `metrics.period`.

Counters are deltas since the last report (MM2's record-count/byte-count, made per period); latency
and age are summarised per period; offsets and lag are the latest levels seen.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from driver.wire.raw_metrics import LatencySummary, PartitionMetrics, ReplicationMetrics

# Keeps a long period's summary cheap: beyond this, latencies are sampled evenly rather than all kept.
MAX_SAMPLES_PER_PERIOD = 4096


@dataclass
class PartitionStats:
    remote_topic: str
    upstream_topic: str
    partition: int
    record_count: int = 0
    byte_count: int = 0
    latencies: list[float] = field(default_factory=list)
    ages: list[float] = field(default_factory=list)
    seen: int = 0
    upstream_offset: int | None = None  # last replicated
    target_offset: int | None = None
    source_end_offset: int | None = None

    def replicated(self, upstream_offset: int, target_offset: int, size: int, latency_ms: float,
                   age_ms: float) -> None:
        self.record_count += 1
        self.byte_count += size
        self.upstream_offset = upstream_offset
        self.target_offset = target_offset
        self.seen += 1
        if len(self.latencies) < MAX_SAMPLES_PER_PERIOD:
            self.latencies.append(latency_ms)
            self.ages.append(age_ms)
        else:  # replace evenly so the summary still covers the whole period
            slot = self.seen % MAX_SAMPLES_PER_PERIOD
            self.latencies[slot] = latency_ms
            self.ages[slot] = age_ms

    def records_lag(self) -> int | None:
        if self.source_end_offset is None:
            return None
        next_offset = 0 if self.upstream_offset is None else self.upstream_offset + 1
        return max(0, self.source_end_offset - next_offset)

    def report(self, ts: int, period_ms: int, source: str, target: str) -> PartitionMetrics:
        latency, age = LatencySummary.of(self.latencies), LatencySummary.of(self.ages)
        if latency is not None:  # last = the most recent, not the last slot written
            latency = LatencySummary(latency.min, latency.max, latency.avg, self.latencies[-1],
                                     self.record_count)
            age = LatencySummary(age.min, age.max, age.avg, self.ages[-1], self.record_count)  # type: ignore[union-attr]
        record = PartitionMetrics(
            ts=ts, period_ms=period_ms, source=source, target=target, topic=self.remote_topic,
            upstream_topic=self.upstream_topic, partition=self.partition,
            record_count=self.record_count, byte_count=self.byte_count,
            replication_latency_ms=latency, record_age_ms=age, records_lag=self.records_lag(),
            source_end_offset=self.source_end_offset, upstream_offset=self.upstream_offset,
            target_offset=self.target_offset)
        self.record_count = self.byte_count = self.seen = 0
        self.latencies, self.ages = [], []
        return record


class ReplicationStats:
    """Thread-safe counters of one replication: the worker writes, the reporter drains."""

    def __init__(self, source: str, target: str) -> None:
        self.source, self.target = source, target
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], PartitionStats] = {}
        self._last_report = time.time()
        self.status = "RUNNING"
        self.error: str | None = None
        self.topics_replicated = 0

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

    def drain(self, now: float | None = None) -> list[PartitionMetrics | ReplicationMetrics]:
        now = time.time() if now is None else now
        ts, period_ms = int(now * 1000), int((now - self._last_report) * 1000)
        self._last_report = now
        with self._lock:
            records: list[PartitionMetrics | ReplicationMetrics] = [
                s.report(ts, period_ms, self.source, self.target) for s in self._partitions.values()]
        records.append(ReplicationMetrics(
            ts=ts, period_ms=period_ms, source=self.source, target=self.target, status=self.status,
            error=self.error, workers=1, tasks=1, topics_replicated=self.topics_replicated))
        return records
