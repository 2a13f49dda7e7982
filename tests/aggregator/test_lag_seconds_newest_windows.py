"""Lag in seconds over each report's newest windows first (partition_lag._lag_seconds) gives what the
whole table of TABLE_WINDOWS windows gives (the rule before: every row over the whole table), for every
row: the same seconds and the same `exact`. Histories with flat runs, rewinds (a lagging replica's reads),
gaps, integers past 2^53 and infinities, reports caught up and reports whose position lies anywhere in the
table or before it; partitions and groups; with chunks of a few rows too."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import lag_arrays, latest_values, partition_lag
from aggregator.offset_history import WINDOW_MS, OffsetHistory, window_number
from aggregator.window_partials import latest_of

T0 = 1_700_000_000_000 // WINDOW_MS * WINDOW_MS
_step = st.sampled_from([0, 0, 0, 1, 3, 40, 40, -7, -200])
_start = st.one_of(st.integers(0, 1000), st.integers(2**53 - 300, 2**53 + 300), st.just(10**15),
                   st.just(-(2**53) - 9))
_window = st.tuples(_step, st.sampled_from([True, True, True, False]), st.integers(0, 60))
# A row: its older windows (before the newest few) and its newest ones, each an end-offset step (a random
# walk, some windows absent) and when in its window the last was; a jump between the two (a rewind, a flat
# run across, a leap past 2^53); the report's end offset step (None: a group's report, or a partition's
# without one); its lag, or the newest window (counted back) its position is at; where in its window the
# report is; how far behind the newest window its own window is; an infinity among the older windows.
_jump = st.sampled_from([0, 0, 5, -3, -5000, -(2**53), 2**53])
_newer = st.lists(_window, max_size=partition_lag.NEWEST_WINDOWS + 2)
_lag = st.one_of(st.none(), st.integers(-3, 3), st.integers(0, 3000), st.just(2**60),
                 st.tuples(st.integers(0, 8)))
_row = st.tuples(_start, st.lists(_window, max_size=64), _jump, _newer, st.one_of(st.none(), _step), _lag,
                 st.integers(0, WINDOW_MS - 1), st.integers(0, 2),
                 st.sampled_from([None, math.inf, -math.inf]), st.booleans())


def _whole_table(history, records, is_partition, rows, ts, high, low):
    """The rule before: every row over the whole table."""
    end = np.where(is_partition, partition_lag._numbers([r.get("source_end_offset") for r in records]),
                   math.nan)
    lag = np.where(is_partition, partition_lag._numbers([r.get("records_lag") for r in records]),
                   partition_lag._numbers([r.get("group_lag") for r in records]))
    upstream = np.where(is_partition, math.nan,
                        partition_lag._numbers([r.get("group_upstream_offset") for r in records]))
    position = np.trunc(np.where(is_partition, end - lag, upstream))
    offsets, times, valid = partition_lag._end_offsets(history, rows, ts, high, low, end,
                                                       partition_lag.TABLE_WINDOWS)
    got = lag_arrays.lag_seconds(offsets, times, valid, position, lag, ts)
    return got.seconds, got.exact


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=12), slots=st.sampled_from([64, 128]),
       chunk_rows=st.sampled_from([1, 2, partition_lag.CHUNK_ROWS]))
def test_newest_windows_first_give_what_the_whole_table_gives(rows, slots, chunk_rows):
    history = OffsetHistory(slots)
    keys = [("west", "east", "east.t", i) for i in range(len(rows))]
    at = history.row_of(keys)
    records, is_partition, ts = [], [], []
    merged: list[tuple[int, int, float]] = []
    for row, (start, older, jump, newer, own_step, lag, within, behind, infinite, partition) in zip(
            at.tolist(), rows, strict=True):
        newest = T0 // WINDOW_MS + 100
        offset, offsets = start, []
        for k, (step, present, ms) in enumerate([*older, *newer]):
            offset += step + (jump if k == len(older) else 0)
            last = infinite if infinite and k == len(older) // 2 else float(offset)
            if present:
                merged.append((row, (newest - len(older) - len(newer) + 1 + k) * WINDOW_MS, last, ms))
                offsets.append(offset)
        report_ts = (newest - behind) * WINDOW_MS + within
        end = None if own_step is None else offset + own_step
        if isinstance(lag, tuple):  # the position at a window's end offset
            lag = None if end is None or not offsets else end - offsets[max(0, len(offsets) - 1 - lag[0])]
        up = None if end is None else end - (lag or 0)
        records.append({"kind": "partition", "source_end_offset": end, "records_lag": lag} if partition else
                       {"kind": "group", "group_upstream_offset": up, "group_lag": lag})
        is_partition.append(partition)
        ts.append(report_ts)
        records[-1] |= {"ts": report_ts, "target": "west", "source": "east", "topic": "east.t",
                        "partition": row}
    if merged:
        r, start_ms, last, ms = (np.array(c) for c in zip(*merged, strict=True))
        history.merge("source_end_offset", r.astype(np.int64), start_ms.astype(np.int64),
                      last.astype(np.float64), start_ms.astype(np.int64) + ms)
    ts_a = np.array(ts, np.int64)
    high = window_number(ts_a)
    low = partition_lag._ceil_window(ts_a - latest_values.HISTORY_SPAN_MS)
    args = (np.array(is_partition), at, ts_a, high, low)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partition_lag, "CHUNK_ROWS", chunk_rows)
        # The reports as the sink judges them: columns of the batch's newest records (batch_plan).
        reports = partition_lag._Reports(latest_of(records))
        seconds, exact = partition_lag._lag_seconds(history, reports, *args)
    expected_seconds, expected_exact = _whole_table(history, records, *args)
    assert exact.tolist() == expected_exact.tolist()
    assert [str(x) for x in seconds] == [str(x) for x in expected_seconds]
