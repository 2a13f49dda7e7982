"""Pure rules that turn stored windows into the API's answers: range summaries, merges, downsampling.

Summaries over a range follow the metric's kind (contract.records.raw_metrics.MetricKind): counters add up,
gauges report their last level, latencies report the record-weighted average.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contract.records.raw_metrics import SERVED_METRICS as METRICS
from contract.records.raw_metrics import MetricKind
from contract.redis_layout import WindowAggregate


@dataclass(frozen=True)
class WindowColumns:
    """Stored windows as one list per field, in window order.

    A summary is mostly whole-column work (sums, extremes) and the API's hot path decodes a reply
    straight into columns with C-level loops, instead of building one object per window.
    """

    starts: list[int]
    counts: list[float]
    sums: list[float]
    mins: list[float]
    maxs: list[float]
    lasts: list[float]

    @classmethod
    def of(cls, windows: Sequence[WindowAggregate]) -> WindowColumns:
        return cls(
            [w.start_ms for w in windows],
            [w.count for w in windows],
            [w.sum for w in windows],
            [w.min for w in windows],
            [w.max for w in windows],
            [w.last for w in windows],
        )


@dataclass
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


def point_of(kind: MetricKind, w: WindowAggregate) -> Point:
    avg = w.sum / w.count if w.count else 0.0
    value = w.sum if kind is MetricKind.COUNTER else w.last if kind is MetricKind.GAUGE else avg
    return Point(w.start_ms, value, w.min, w.max, avg, w.sum, w.count)


def summarize(metric: str, granularity: str, windows: Sequence[WindowAggregate]) -> MetricSeries:
    return summarize_columns(metric, granularity, WindowColumns.of(windows))


def summarize_columns(metric: str, granularity: str, columns: WindowColumns) -> MetricSeries:
    """The range summary and points of one metric; the same rules as point_of, column by column."""
    c = columns
    if not c.starts:
        return MetricSeries(metric, granularity, None, None, None, None, None, 0, [])
    kind = METRICS[metric].kind
    avgs = [total / count if count else 0.0 for total, count in zip(c.sums, c.counts, strict=True)]
    values = c.sums if kind is MetricKind.COUNTER else c.lasts if kind is MetricKind.GAUGE else avgs
    points = list(map(Point, c.starts, values, c.mins, c.maxs, avgs, c.sums, c.counts))
    total = sum(c.sums)
    count = sum(c.counts)
    avg = total / count if count else 0.0
    if kind is MetricKind.COUNTER:
        return MetricSeries(
            metric, granularity, total, min(values), max(values), total / len(points), total, count, points
        )
    value = c.lasts[-1] if kind is MetricKind.GAUGE else avg
    return MetricSeries(metric, granularity, value, min(c.mins), max(c.maxs), avg, total, count, points)


def merge_subjects(series: Iterable[Sequence[WindowAggregate]]) -> list[WindowAggregate]:
    """Windows of several subjects (topics, partitions) merged per window start.

    ``last`` adds up: for a gauge it is the level of the whole (total lag of a replication), for a
    counter it is unused. min/max stay per-sample extremes, as for a single subject.
    """
    merged: dict[int, WindowAggregate] = {}
    for windows in series:
        for w in windows:
            seen = merged.get(w.start_ms)
            merged[w.start_ms] = (
                w
                if seen is None
                else WindowAggregate(
                    w.start_ms,
                    seen.count + w.count,
                    seen.sum + w.sum,
                    min(seen.min, w.min),
                    max(seen.max, w.max),
                    seen.last + w.last,
                )
            )
    return [merged[start] for start in sorted(merged)]


def downsample(windows: Sequence[WindowAggregate], bucket_ms: int) -> list[WindowAggregate]:
    """Consecutive windows combined into buckets of ``bucket_ms`` (for a client's maxDataPoints).

    ``last`` is the newest window's, as within one stored window.
    """
    if bucket_ms <= 0:
        return list(windows)
    buckets: dict[int, WindowAggregate] = {}
    for w in windows:
        start = w.start_ms - w.start_ms % bucket_ms
        seen = buckets.get(start)
        buckets[start] = (
            WindowAggregate(start, w.count, w.sum, w.min, w.max, w.last)
            if seen is None
            else (
                WindowAggregate(
                    start,
                    seen.count + w.count,
                    seen.sum + w.sum,
                    min(seen.min, w.min),
                    max(seen.max, w.max),
                    w.last,
                )
            )
        )
    return [buckets[start] for start in sorted(buckets)]
