"""Latest values: lag in seconds from the end-offset windows, recent per-period record counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.lag_seconds import OffsetPoint, OffsetTimeTable, lag_seconds
from aggregator.latest_values import (
    end_offset_table,
    group_latest,
    partition_latest,
    recent_record_counts,
    replication_latest,
)
from contract.redis_layout import FINEST_WINDOW, WindowAggregate, window_start

T0 = 1_700_000_000_000  # a 10 s boundary


def gauge(start_ms: int, last: float) -> WindowAggregate:
    return WindowAggregate(start_ms, 1, last, last, last, last)


def counter(start_ms: int, total: float) -> WindowAggregate:
    return WindowAggregate(start_ms, 1, total, total, total, total)


# The source end offset grows by 100 per 10 s window: 100 at T0+5 s (the first window's middle) ...
HISTORY = [gauge(T0 + i * 10_000, 100 * (i + 1)) for i in range(4)]


def test_end_offset_table_uses_window_middles_and_the_exact_newest_point():
    table = end_offset_table(HISTORY, T0 + 32_000, OffsetPoint(420, T0 + 32_000))
    # The newest point replaces its own window (T0+30 s), whose `last` may be older.
    assert [(p.offset, p.timestamp_ms) for p in table.points] == [
        (100, T0 + 5000), (200, T0 + 15_000), (300, T0 + 25_000), (420, T0 + 32_000)]


def test_end_offset_table_ignores_windows_after_now():
    table = end_offset_table(HISTORY, T0 + 12_000)
    assert [(p.offset, p.timestamp_ms) for p in table.points] == [(100, T0 + 5000), (200, T0 + 12_000)]


def table_as_it_was(windows: list[WindowAggregate], now_ms: int,
                    newest: OffsetPoint | None) -> OffsetTimeTable:
    """end_offset_table before its points were made by tuple.__new__ (the oracle)."""
    skip_from = window_start(newest.timestamp_ms, FINEST_WINDOW.name) if newest else now_ms + 1
    points = [OffsetPoint(int(w.last), min(w.start_ms + 5_000, now_ms))
              for w in sorted(windows, key=lambda w: w.start_ms)
              if w.start_ms <= now_ms and w.start_ms < skip_from]
    return OffsetTimeTable.from_points([*points, *([newest] if newest else [])])


# Windows out of order, repeated starts, gaps, end offsets that fall back (a reset), flat runs.
_end_offsets = st.lists(st.tuples(st.integers(0, 80), st.sampled_from([0, 0, 1, 7, 500, -3, -10_000])),
                        max_size=75)


@settings(max_examples=300, deadline=None)
@given(steps=_end_offsets, now_window=st.integers(0, 85), now_in_window=st.integers(0, 9_999),
       newest_offset=st.one_of(st.none(), st.integers(0, 50_000)), position=st.integers(0, 50_000))
def test_end_offset_table_is_the_table_it_was(steps, now_window, now_in_window, newest_offset, position):
    windows, offset = [], 10_000
    for window_index, step in steps:
        offset = max(0, offset + step)
        windows.append(gauge(T0 + window_index * 10_000, offset))
    now = T0 + now_window * 10_000 + now_in_window
    newest = None if newest_offset is None else OffsetPoint(newest_offset, now)
    table = end_offset_table(windows, now, newest)
    oracle = table_as_it_was(windows, now, newest)
    assert table == oracle
    assert all(type(p) is OffsetPoint for p in table.points)
    assert lag_seconds(table, position, now) == lag_seconds(oracle, position, now)


def test_partition_lag_seconds_interpolates_the_next_offset_to_replicate():
    record = {"ts": T0 + 35_000, "source_end_offset": 400, "records_lag": 250, "upstream_offset": 149,
              "target_offset": 149}
    value = partition_latest(record, HISTORY[:3])
    # Next offset to replicate 150: the end offset passed it at T0+10 s (between 100 and 200) -> 25 s.
    assert value == {"ts": T0 + 35_000, "records_lag": 250, "lag_seconds": pytest.approx(25.0),
                     "source_end_offset": 400, "upstream_offset": 149, "target_offset": 149}


@pytest.mark.parametrize(("record", "history", "expected"), [
    pytest.param({"ts": T0, "source_end_offset": 10, "records_lag": 0}, [], 0.0, id="caught up is zero"),
    pytest.param({"ts": T0, "source_end_offset": 10, "records_lag": 5}, [], None, id="one point is unknown"),
    pytest.param({"ts": T0, "records_lag": 5}, HISTORY, None, id="no end offset is unknown"),
    pytest.param({"ts": T0 + 1000, "source_end_offset": 90, "records_lag": 5}, [gauge(T0 + 10_000, 100)],
                 None, id="history after the report is ignored"),
])
def test_partition_lag_seconds_edge_cases(record, history, expected):
    assert partition_latest(record, history)["lag_seconds"] == expected


def test_group_lag_seconds_uses_the_upstream_end_offset_history():
    record = {"ts": T0 + 40_000, "group_lag": 150, "group_upstream_offset": 250,
              "group_downstream_offset": 240}
    value = group_latest(record, HISTORY)
    # Offset 250 is half-way between 200 (T0+15 s) and 300 (T0+25 s): 20 s before the report.
    assert value == {"ts": T0 + 40_000, "group_lag": 150, "lag_seconds": pytest.approx(20.0),
                     "upstream_offset": 250, "downstream_offset": 240}
    assert group_latest({**record, "group_lag": 0}, [])["lag_seconds"] == 0.0
    assert group_latest({**record, "group_upstream_offset": None}, HISTORY)["lag_seconds"] is None


def test_recent_record_counts_per_period_oldest_first():
    ts = T0 + 60_000
    windows = [counter(T0, 7), counter(T0 + 30_000, 5), counter(T0 + 50_000, 2), counter(T0 + 60_000, 3),
               counter(T0 + 70_000, 99)]  # after the report: not counted yet
    # 30 s periods ending at ts: (ts-30 s, ts] holds T0+50 s and T0+60 s, (ts-60 s, ts-30 s] T0+30 s ...
    assert recent_record_counts(windows, ts, 30_000, periods=3) == [7, 5, 5]
    assert recent_record_counts([], ts, 30_000, periods=2) == [0, 0]


def test_replication_latest_keeps_the_report_and_adds_counts():
    record = {"kind": "replication", "v": 1, "ts": T0 + 20_000, "period_ms": 10_000, "source": "east",
              "target": "west", "status": "FAILED", "error": "boom", "workers": 2, "tasks": 3,
              "topics_replicated": 4}
    value = replication_latest(record, [counter(T0, 1), counter(T0 + 10_000, 0), counter(T0 + 20_000, 4)])
    assert value["recent_record_counts"][-3:] == [1, 0, 4] and len(value["recent_record_counts"]) == 10
    assert {k: value[k] for k in ("ts", "period_ms", "status", "error", "workers", "tasks",
                                  "topics_replicated", "enabled", "last_heartbeat_ts")} == {
        "ts": T0 + 20_000, "period_ms": 10_000, "status": "FAILED", "error": "boom", "workers": 2, "tasks": 3,
        "topics_replicated": 4, "enabled": True, "last_heartbeat_ts": None}


def test_replication_without_period_counts_one_window_per_period():
    windows = [counter(T0, 3), counter(T0 + 10_000, 1)]
    value = replication_latest({"ts": T0 + 10_000, "status": "RUNNING"}, windows)
    assert value["recent_record_counts"][-2:] == [3, 1]


@settings(max_examples=300, deadline=None)
@given(steps=_end_offsets, asks=st.lists(st.tuples(
    st.integers(0, 85), st.integers(0, 9_999), st.one_of(st.none(), st.integers(0, 50_000)),
    st.sampled_from(["same", "copy", "changed", "grown", "other"])), min_size=1, max_size=6))
def test_a_reused_table_is_the_table_it_was(steps, asks):
    """A history's table is reused while its windows are equal (end_offset_table's `reuse`): asked again
    with the same windows, equal copies, one window changed, one more, or another history's, at other
    clocks and newest points, it is always the table built afresh."""
    windows, offset = [], 10_000
    for window_index, step in steps:
        offset = max(0, offset + step)
        windows.append(gauge(T0 + window_index * 10_000, offset))
    reuse = ("partition", "west", "east", "t", 0)
    for now_window, now_in_window, newest_offset, change in asks:
        if change == "copy":
            windows = [gauge(w.start_ms, w.last) for w in windows]
        elif change == "changed" and windows:
            windows = [*windows[:-1], gauge(windows[-1].start_ms, windows[-1].last + 3)]
        elif change == "grown":
            windows = [*windows, gauge(T0 + now_window * 10_000, offset + now_in_window)]
        elif change == "other":
            end_offset_table([gauge(T0, 5), gauge(T0 + 10_000, 9)], T0 + 900_000, None, reuse)
        now = T0 + now_window * 10_000 + now_in_window
        newest = None if newest_offset is None else OffsetPoint(newest_offset, now)
        assert end_offset_table(windows, now, newest, reuse) == table_as_it_was(windows, now, newest)
