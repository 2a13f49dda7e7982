"""Which stored history each latest value of a batch is derived from, and where that value is kept.

Pure: the sink (aggregator.redis_sink) loads the windows these reads name, from its kept history or
Redis, then derives each value (aggregator.latest_values) and writes it where `latest_value` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aggregator import latest_values, partition_verdicts
from aggregator.batch_plan import Subject
from aggregator.window_history import series_id
from contract import redis_layout as layout


# Not frozen: three a partition every batch, and a frozen dataclass sets each field through
# object.__setattr__ (as redis_layout.WindowAggregate). Never changed once made.
@dataclass(slots=True)
class HistoryRead:
    """One latest value to derive: its subject, record and the window range of history it needs."""

    kind: str
    subject: tuple[str, ...]
    record: dict[str, Any]
    series: layout.SeriesId
    low_ms: int
    high_ms: int


def history_reads(latest: Mapping[Subject, dict[str, Any]],
                  replication_records: Mapping[tuple[str, str], dict[str, Any]]) -> list[HistoryRead]:
    """The reads of a batch's latest values: for each partition and group report in `latest` its
    end-offset history; for each replication whose latest value the batch changes (`replication_records`)
    its record counts. Lag verdicts read offsets (offset_reads)."""
    reads: list[HistoryRead] = []
    for subject, record in latest.items():
        kind, target, source, topic, partition, _ = subject
        if kind in ("partition", "group"):
            series = series_id(target, source, topic, int(partition), "source_end_offset")
            ts = int(record["ts"])
            low = ts - latest_values.HISTORY_SPAN_MS
            reads.append(HistoryRead(kind, subject, record, series, low, ts))
    for (target, source), record in replication_records.items():
        series = series_id(target, source, layout.ALL_TOPICS, layout.WHOLE_TOPIC, "record_count")
        ts, period = int(record["ts"]), latest_values.effective_period_ms(record.get("period_ms"))
        reads.append(HistoryRead("replication", ("replication", target, source), record, series,
                                 ts - latest_values.recent_span_ms(period) + 1, ts))
    return reads


def offset_reads(reports: Iterable[tuple[Subject, dict[str, Any]]]) -> list[HistoryRead]:
    """The offset series each partition report's lag verdict looks back over (partition_verdicts)."""
    reads: list[HistoryRead] = []
    for subject, record in reports:
        ts = int(record["ts"])
        low = ts - partition_verdicts.lookback_of(record)
        reads += [HistoryRead("offsets", subject, record, s, low, ts)
                  for s in partition_verdicts.offset_series(subject)]
    return reads


def earliest_starts(reads: list[HistoryRead]) -> dict[str, int]:
    """Per metric, the earliest window a read of the batch starts at."""
    earliest: dict[str, int] = {}
    for read in reads:
        metric = read.series.metric
        earliest[metric] = min(read.low_ms, earliest.get(metric, read.low_ms))
    return earliest


def uncovered(reads: list[HistoryRead], covers: Callable[[layout.SeriesId, int], bool]
              ) -> dict[layout.SeriesId, tuple[int, int]]:
    """The series whose kept history (`covers`) lacks the range a read wants, each with the lowest start
    and the widest span read of it."""
    wanted: dict[layout.SeriesId, tuple[int, int]] = {}
    for read in reads:
        low, span = wanted.get(read.series, (read.low_ms, 0))
        low, span = min(low, read.low_ms), max(span, read.high_ms - read.low_ms)
        if not covers(read.series, low):
            wanted[read.series] = (low, span)
    return wanted


def latest_value(kind: str, subject: tuple[str, ...] | Subject, record: dict[str, Any],
                 history: list[layout.WindowAggregate]) -> tuple[str, str, dict[str, Any]]:
    """(hash key, field, value) of one subject's latest value."""
    if kind == "replication":
        target, source = subject[1], subject[2]
        return (layout.replication_status_key(target, source), "replication",
                latest_values.replication_latest(record, history))
    _, target, source, topic, partition, group = subject
    if kind == "partition":
        return (layout.partition_latest_key(target, source, topic), partition,
                latest_values.partition_latest(record, history))
    return (layout.group_latest_key(target, source, group),
            layout.group_latest_field(topic, int(partition)), latest_values.group_latest(record, history))
