"""The array rules (aggregator.lag_arrays) give what the pure functions give, a partition at a time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import lag_arrays
from aggregator.lag_seconds import OffsetPoint, OffsetTimeTable, lag_seconds
from contract.lag_evaluation import EvaluationPolicy, _reason

T0 = 1_700_000_000_000
_huge = st.integers(2**53 - 5, 2**53 + 5)
_offset = st.one_of(st.integers(0, 60), st.integers(10**15, 10**15 + 40), _huge)

# A row: per slot an offset or None (absent), in time order; a position (None: unknown) and a lag.
_row = st.tuples(st.lists(st.one_of(st.none(), _offset), min_size=1, max_size=70),
                 st.one_of(st.none(), _offset), st.one_of(st.none(), st.integers(-3, 50)),
                 st.integers(0, 4_000_000))


def _table_seconds(slots, times, position, lag, now_ms, capacity):
    if lag is not None and lag <= 0:
        return 0.0
    if position is None:
        return None
    points = [OffsetPoint(o, t) for o, t in zip(slots, times, strict=True) if o is not None]
    return lag_seconds(OffsetTimeTable.from_points(points, capacity), position, now_ms)


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=8), capacity=st.sampled_from([2, 3, 5, 60]),
       spacing=st.sampled_from([1, 7, 10_000]))
def test_lag_seconds_as_the_table_gives_it(rows, capacity, spacing):
    width = max(len(slots) for slots, *_ in rows)
    n = len(rows)
    offsets, valid = np.zeros((n, width)), np.zeros((n, width), bool)
    times = np.tile(T0 + spacing * np.arange(width, dtype=np.int64), (n, 1))
    for i, (slots, *_) in enumerate(rows):
        for j, o in enumerate(slots):
            if o is not None:
                offsets[i, j], valid[i, j] = o, True
    position = np.array([np.nan if p is None else p for _, p, _, _ in rows], np.float64)
    lag = np.array([np.nan if g is None else g for _, _, g, _ in rows], np.float64)
    now = np.array([T0 + spacing * width + a for *_, a in rows], np.int64)
    got = lag_arrays.lag_seconds(offsets, times, valid, position, lag, now, capacity)
    for i, (slots, p, g, _) in enumerate(rows):
        expected = _table_seconds(slots, [int(t) for t in times[i, :len(slots)]], p, g, int(now[i]), capacity)
        # A row the arrays cannot give exactly is flagged; only offsets past 2^53 (exact in Python) may be.
        if not got.exact[i]:
            assert any(o is not None and o >= 10**15 for o in [*slots, p])
            continue
        if expected is None:
            assert np.isnan(got.seconds[i])
        else:
            assert got.seconds[i] == expected and str(got.seconds[i]) == str(float(expected))


_obs = st.tuples(st.integers(0, 40), st.integers(-2, 30))  # offset, lag


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(st.one_of(st.none(), _obs), min_size=1, max_size=25),
                               st.one_of(st.none(), st.integers(-2, 30)), st.integers(0, 400_000),
                               st.sampled_from([1_000, 5_000, 30_000])), min_size=1, max_size=8),
       spacing=st.sampled_from([1_000, 10_000]), intervals=st.sampled_from([1, 3, 10]))
def test_burrow_reasons_as_the_rules_give_them(rows, spacing, intervals):
    width = max(len(slots) for slots, *_ in rows)
    n = len(rows)
    ts = np.tile(T0 + spacing * np.arange(width, dtype=np.int64), (n, 1))
    offsets, lags, valid = np.zeros((n, width)), np.zeros((n, width)), np.zeros((n, width), bool)
    for i, (slots, *_) in enumerate(rows):
        for j, o in enumerate(slots):
            if o is not None:
                offsets[i, j], lags[i, j], valid[i, j] = o[0], o[1], True
    current = np.array([np.nan if c is None else c for _, c, _, _ in rows])
    now = np.array([T0 + spacing * width + a for _, _, a, _ in rows], np.int64)
    policies = [EvaluationPolicy.for_metrics_period(p, intervals) for *_, p in rows]
    got = lag_arrays.burrow(ts, offsets, lags, valid, intervals, current, now,
                            np.array([p.stop_after_ms for p in policies]),
                            np.array([p.stall_after_ms for p in policies]),
                            np.array([p.allowed_lag for p in policies]))
    for i, (slots, c, _, _) in enumerate(rows):
        window = [(int(ts[i, j]), o[0], o[1]) for j, o in enumerate(slots) if o is not None][-intervals:]
        assert got.observed[i] == bool(window)
        if not window:
            continue
        wts, woff, wlag = (list(x) for x in zip(*window, strict=True))
        current_lag = max(0, wlag[-1] if c is None else c)
        assert lag_arrays.REASONS[got.reason[i]] == _reason(wts, woff, wlag, current_lag, int(now[i]),
                                                            policies[i])
        assert got.current_lag[i] == current_lag and got.count[i] == len(window)
        assert list(got.start[i]) == list(window[0]) and list(got.end[i]) == list(window[-1])
