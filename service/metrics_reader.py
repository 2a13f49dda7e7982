"""Reads rollups from Redis through the aggregator's layout: the service's only Redis reader.

Views never touch Redis; they ask this module for typed answers. Summaries over a range follow the
metric's kind (driver.wire.raw_metrics.MetricKind): counters add up, gauges report their last level,
latencies report the record-weighted average.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from aggregator import redis_layout as layout
from driver.wire.raw_metrics import METRICS, MetricKind


class NotFound(LookupError):
    """An unknown cluster, topic or metric; the message names which."""


@dataclass(frozen=True)
class Point:
    ts: int
    value: float
    min: float
    max: float
    avg: float
    sum: float
    count: float


@dataclass(frozen=True)
class MetricSeries:
    metric: str
    granularity: str
    value: float | None
    min: float | None
    max: float | None
    avg: float | None
    sum: float | None
    count: float
    series: list[Point]


def point_of(kind: MetricKind, w: layout.WindowAggregate) -> Point:
    value = {MetricKind.COUNTER: w.sum, MetricKind.GAUGE: w.last, MetricKind.LATENCY: w.avg}[kind]
    return Point(w.start_ms, value, w.min, w.max, w.avg, w.sum, w.count)


def summarize(metric: str, granularity: str, windows: list[layout.WindowAggregate]) -> MetricSeries:
    kind = METRICS[metric].kind
    points = [point_of(kind, w) for w in windows]
    if not windows:
        return MetricSeries(metric, granularity, None, None, None, None, None, 0, [])
    total = sum(w.sum for w in windows)
    count = sum(w.count for w in windows)
    avg = total / count if count else 0.0
    if kind is MetricKind.COUNTER:
        values = [p.value for p in points]
        return MetricSeries(metric, granularity, total, min(values), max(values), total / len(points), total,
                            count, points)
    value = windows[-1].last if kind is MetricKind.GAUGE else avg
    return MetricSeries(metric, granularity, value, min(w.min for w in windows), max(w.max for w in windows),
                        avg, total, count, points)


class MetricsReader:
    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def targets(self) -> list[str]:
        return sorted(self._strings(self.client.smembers(layout.targets_key())))

    def sources(self, target: str) -> list[str]:
        return sorted(self._strings(self.client.smembers(layout.sources_key(target))))

    def topics(self, target: str, source: str) -> dict[str, str]:
        """Remote topic -> upstream topic for one replication."""
        raw = self.client.hgetall(layout.topics_key(target, source))
        return {self._string(k): self._string(v) for k, v in raw.items()}

    def remote_topic(self, source: str, target: str, upstream_topic: str) -> str:
        self._require_replication(source, target)
        for remote, upstream in self.topics(target, source).items():
            if upstream == upstream_topic:
                return remote
        raise NotFound(f"no topic {upstream_topic!r} is replicated from {source!r} to {target!r}")

    def topic_metric(self, source: str, target: str, topic: str, metric: str, from_ms: int, to_ms: int,
                     granularity: str) -> MetricSeries:
        self.require_metric(metric)
        window = layout.auto_window(from_ms, to_ms) if granularity == "auto" else granularity
        series = layout.SeriesId(target, source, topic, layout.WHOLE_TOPIC, metric)
        members = self.client.zrangebyscore(layout.series_key(series, window), from_ms, to_ms)
        return summarize(metric, window, [layout.decode_member(m) for m in members])

    @staticmethod
    def require_metric(metric: str) -> None:
        if metric not in METRICS:
            raise NotFound(f"unknown metric {metric!r}; known metrics: {', '.join(sorted(METRICS))}")

    def _require_replication(self, source: str, target: str) -> None:
        if target not in self.targets():
            raise NotFound(f"no metrics for target cluster {target!r}")
        if source not in self.sources(target):
            raise NotFound(f"no replication from {source!r} to {target!r}")

    @staticmethod
    def _string(value: bytes | str) -> str:
        return value.decode() if isinstance(value, bytes) else value

    @classmethod
    def _strings(cls, values: set) -> list[str]:
        return [cls._string(v) for v in values]
