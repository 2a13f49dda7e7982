"""Latest-value records (the contract in redis_layout) from a raw record and stored window history.

Pure functions: the sink reads the window history out of Redis (merged with the batch being written)
and hands it here, so what ends up in a latest hash depends only on the input, never on the clock (the
lag tables kept for reuse, see end_offset_table, are only reused for equal windows).
Lag in seconds is evaluated at the report's own `ts`; the reader can age it further.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable
from functools import partial
from operator import attrgetter
from typing import Any

from aggregator.lag_seconds import DEFAULT_TABLE_CAPACITY, OffsetPoint, OffsetTimeTable, lag_seconds
from contract.records.raw_metrics import READER_FIELD_TYPES, READER_KINDS
from contract.redis_layout import FINEST_WINDOW, RECENT_PERIODS, WindowAggregate, window_start

# Window history needed for one lag table: the exporter's 60 points, one per 10 s window.
HISTORY_SPAN_MS = DEFAULT_TABLE_CAPACITY * FINEST_WINDOW.size_ms
_MID_WINDOW_MS = FINEST_WINDOW.size_ms // 2
_START = attrgetter("start_ms")
_new_tuple = tuple.__new__


def end_offset_table(windows: Iterable[WindowAggregate], now_ms: int,
                     newest: OffsetPoint | None = None, reuse: Hashable | None = None) -> OffsetTimeTable:
    """Offset -> time history of a partition's end offset from its source_end_offset 10 s windows.

    A window only keeps the last value seen in it, not when; its middle is the unbiased guess (the
    error is at most half a window). `newest`, an exact observation, replaces its own window.
    `reuse` names the history (its subject): the table of the windows it was last asked with is kept
    under that name and reused while they are the same, whatever `now_ms` and `newest`.
    """
    skip_from = window_start(newest.timestamp_ms, FINEST_WINDOW.name) if newest else now_ms + 1
    until = min(now_ms, skip_from - 1)
    ordered = sorted(windows, key=_START)
    used = ordered[:bisect_right(ordered, until, key=_START)]
    if used and used[-1].start_ms + _MID_WINDOW_MS > now_ms:  # a middle after now: the clock's own table
        return OffsetTimeTable.from_points([*_points(used, now_ms), *([newest] if newest else [])])
    built_from, built = _BUILT.get(reuse, (None, None)) if reuse is not None else (None, None)
    # Equal windows (by value, identity first: usually the very windows of the last batch) give equal
    # points: a table is the same until the partition's history gains or changes a window, ~every 10 s.
    same = built_from == used
    if same and built is not None:
        held = built
    else:
        held = OffsetTimeTable.from_points(_points(used, now_ms)).points
        if reuse is not None:
            # Points are kept from the second time the same windows come: a backlog's batches each bring
            # new windows, and their ~60 points a partition kept for nothing are long-lived objects that
            # made the collector's full passes more frequent (bench/RESULTS.md, "lag tables").
            _remember(reuse, used, held if same else None)
    return OffsetTimeTable.from_points((newest,) if newest else (), after=held)


def _points(windows: list[WindowAggregate], now_ms: int) -> list[OffsetPoint]:
    # tuple.__new__: OffsetPoint's own constructor is a Python function, called for each of the ~60
    # points a table of every lagging partition of every batch.
    return [_new_tuple(OffsetPoint, (int(w.last), mid if (mid := w.start_ms + _MID_WINDOW_MS) <= now_ms
                                     else now_ms))
            for w in windows]


# Per history (`reuse`), the windows its table was last built from and the table's points. Building a
# table from ~60 windows was most of a latest value's cost, for every lagging partition of every batch,
# while a partition's committed windows change about once a window (10 s): many batches apart live.
_BUILT: dict[Hashable, tuple[list[WindowAggregate], tuple[OffsetPoint, ...] | None]] = {}
TABLES_KEPT = 1 << 16  # histories whose table is kept: the oldest made go first past this


def _remember(reuse: Hashable, windows: list[WindowAggregate],
              points: tuple[OffsetPoint, ...] | None) -> None:
    _BUILT.pop(reuse, None)
    if len(_BUILT) >= TABLES_KEPT:
        del _BUILT[next(iter(_BUILT))]
    _BUILT[reuse] = (windows, points)


def _lag_seconds(lag: Any, position: Any, table: Callable[[], OffsetTimeTable], now_ms: int) -> float | None:
    """`table` is built only when asked: a caught-up partition (most of them, usually) needs none, and
    building one from 60 windows is most of a latest value's cost."""
    if lag is not None and lag <= 0:
        return 0.0
    if position is None:
        return None
    return lag_seconds(table(), int(position), now_ms)


def partition_latest(record: dict[str, Any], end_offset_windows: Iterable[WindowAggregate]) -> dict[str, Any]:
    """{ts, records_lag, lag_seconds, source_end_offset, upstream_offset, target_offset}."""
    ts, end, lag = int(record["ts"]), record.get("source_end_offset"), record.get("records_lag")
    newest = OffsetPoint(int(end), ts) if end is not None else None
    position = end - lag if end is not None and lag is not None else None
    reuse = ("partition", record.get("target"), record.get("source"), record.get("topic"),
             record.get("partition"))
    table = partial(end_offset_table, end_offset_windows, ts, newest, reuse)
    return {
        "ts": ts, "records_lag": lag, "lag_seconds": _lag_seconds(lag, position, table, ts),
        "source_end_offset": end, "upstream_offset": record.get("upstream_offset"),
        "target_offset": record.get("target_offset"),
    }


def group_latest(record: dict[str, Any], end_offset_windows: Iterable[WindowAggregate]) -> dict[str, Any]:
    """{ts, group_lag, lag_seconds, upstream_offset, downstream_offset}; history: the upstream end
    offsets of the group's topic-partition (see redis_layout.group_latest_key)."""
    ts, lag = int(record["ts"]), record.get("group_lag")
    position = record.get("group_upstream_offset")
    reuse = ("group", record.get("target"), record.get("source"), record.get("group"), record.get("topic"),
             record.get("partition"))
    table = partial(end_offset_table, end_offset_windows, ts, None, reuse)
    return {
        "ts": ts, "group_lag": lag, "lag_seconds": _lag_seconds(lag, position, table, ts),
        "upstream_offset": position, "downstream_offset": record.get("group_downstream_offset"),
    }


def effective_period_ms(period_ms: Any) -> int:
    # A report without a usable period still gets windows counted, one window per period.
    return int(period_ms) if isinstance(period_ms, int | float) and period_ms > 0 else FINEST_WINDOW.size_ms


def recent_record_counts(record_count_windows: Iterable[WindowAggregate], ts: int, period_ms: int,
                         periods: int = RECENT_PERIODS) -> list[int]:
    """Records replicated in each of the last `periods` metrics periods up to `ts`, oldest first.

    Period k (0 = newest) is (ts - (k+1)*period, ts - k*period]; a replication-level record_count
    window counts in the period holding its start.
    """
    counts = [0] * periods
    for window in record_count_windows:
        age = ts - window.start_ms
        if age < 0:
            continue
        k = age // period_ms
        if k < periods:
            counts[periods - 1 - k] += int(window.sum)
    return counts


def recent_span_ms(period_ms: int, periods: int = RECENT_PERIODS) -> int:
    return period_ms * periods


def replication_latest(record: dict[str, Any],
                       record_count_windows: Iterable[WindowAggregate]) -> dict[str, Any]:
    """The driver's replication report plus recent_record_counts (see replication_status_key)."""
    ts, period = int(record["ts"]), effective_period_ms(record.get("period_ms"))
    return {
        "ts": ts, "period_ms": record.get("period_ms"), "status": record.get("status"),
        "error": record.get("error"), "workers": record.get("workers", 0), "tasks": record.get("tasks", 0),
        "last_heartbeat_ts": record.get("last_heartbeat_ts"),
        "topics_replicated": record.get("topics_replicated", 0), "enabled": record.get("enabled", True),
        "recent_record_counts": recent_record_counts(record_count_windows, ts, period),
        "readers": readers_of(record),
    }


def readers_of(record: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """The report's reader health, nested again from its flat `readers__<kind>__<field>` columns (or
    taken as is from a record that still has `readers`); None from a driver that sends none."""
    nested = record.get("readers")
    readers = {}
    for kind in READER_KINDS:
        health = nested.get(kind) if isinstance(nested, dict) else None
        health = health if isinstance(health, dict) else {
            name: record[f"readers__{kind}__{name}"] for name in READER_FIELD_TYPES
            if record.get(f"readers__{kind}__{name}") is not None}
        if health.get("rejected") is not None:
            readers[kind] = {"rejected": health["rejected"], "alive": bool(health.get("alive")),
                             "last_rejection": health.get("last_rejection")}
    return readers or None
