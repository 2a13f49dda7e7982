"""Lag in seconds and Burrow's lag rules over many partitions at once: numpy over partitions x windows.

The same rules as the pure functions a partition at a time (lag_seconds.OffsetTimeTable and lag_seconds,
latest_values.end_offset_table; contract.lag_evaluation._reason), as array operations, because a target
of 100,000 partitions reports each of them every batch and a Python call a partition was most of a batch.
tests/aggregator/test_lag_arrays.py checks both against the pure functions.

Inputs are rows of window slots in time order (oldest first), absent windows marked by `valid`. Values are
float64: window lasts already are, and the integers a record carries are exact in float64 below 2^53.
A row outside that (a record's offset past 2^53, a product of the interpolation past it, a non-finite
last) is flagged `exact=False`: the caller derives it with the pure functions, whose Python integers do
not round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aggregator.lag_seconds import DEFAULT_TABLE_CAPACITY
from contract.lag_evaluation import _STATUS_OF, Reason

EXACT_BELOW = float(2**53)  # integers float64 holds exactly
# Reasons as codes, in the order of contract.lag_evaluation._SEVERITY (the code of a worse reason is larger).
REASONS = (Reason.NOTFOUND, Reason.OK, Reason.WARN, Reason.STOP, Reason.STALL, Reason.REWIND)
STATUS_OF = _STATUS_OF
CODE = {reason: code for code, reason in enumerate(REASONS)}
OK, WARN, STOP, STALL, REWIND = (CODE[r] for r in (Reason.OK, Reason.WARN, Reason.STOP, Reason.STALL,
                                                   Reason.REWIND))


def _shift_right(a: np.ndarray, fill: float | int) -> np.ndarray:
    out = np.empty_like(a)
    out[:, 0] = fill
    out[:, 1:] = a[:, :-1]
    return out


def table_points(offsets: np.ndarray, valid: np.ndarray,
                 capacity: int = DEFAULT_TABLE_CAPACITY) -> np.ndarray:
    """Which of each row's points (offsets in time order, times strictly increasing) an OffsetTimeTable
    built from them keeps: those not below an earlier offset (a read from a lagging replica), of a run of
    equal offsets only its first and last, and of those the newest `capacity`."""
    n, m = offsets.shape
    running = np.maximum.accumulate(np.where(valid, offsets, -np.inf), axis=1)
    kept = valid & (offsets >= _shift_right(running, -np.inf))
    # Kept offsets never decrease, so a run of equal ones is contiguous among the kept: a point inside one
    # (the kept points either side hold its offset) is what the table's online rule replaces.
    index = np.arange(m)
    before = _shift_right(np.maximum.accumulate(np.where(kept, index, -1), axis=1), -1)
    after = np.minimum.accumulate(np.where(kept, index, m)[:, ::-1], axis=1)[:, ::-1]
    after = np.concatenate([after[:, 1:], np.full((n, 1), m)], axis=1)
    padded = np.concatenate([np.full((n, 1), np.nan), offsets, np.full((n, 1), np.nan)], axis=1)
    inside = ((np.take_along_axis(padded, before + 1, axis=1) == offsets)
              & (np.take_along_axis(padded, after + 1, axis=1) == offsets))
    kept &= ~inside
    newest_first = np.cumsum(kept[:, ::-1], axis=1)[:, ::-1]
    return kept & (newest_first <= capacity)


@dataclass
class LagSeconds:
    seconds: np.ndarray  # float64, NaN for None (unknown)
    exact: np.ndarray  # bool: False where the caller must use the pure functions
    # bool: where the answer (and `exact`) would be the same with more points before the row's, as long as
    # none of them is above the row's least offset and all are exact: none needed (no position), caught up,
    # or a bracketing pair found. Such points keep every point of the row kept (none is below them), and
    # the row's pairs are newer than theirs. (The row's oldest kept point could only go inside a run of
    # an equal offset before it if the next kept point holds that offset too: then that point's pair, or
    # being caught up, answers first.)
    local: np.ndarray


def lag_seconds(offsets: np.ndarray, times: np.ndarray, valid: np.ndarray, position: np.ndarray,
                lag: np.ndarray, now_ms: np.ndarray, capacity: int = DEFAULT_TABLE_CAPACITY) -> LagSeconds:
    """Each row's lag in seconds at `now_ms` (latest_values._lag_seconds): 0 when `lag` <= 0 (NaN: none
    known), unknown without a `position` (NaN); else the table of its points (offsets, times: window
    middles, and the report's own end offset last) asked when the end offset reached the position."""
    n, m = offsets.shape
    exact = (np.all(~valid | (np.isfinite(offsets) & (np.abs(offsets) < EXACT_BELOW)), axis=1)
             & ~(np.abs(position) >= EXACT_BELOW))
    kept = table_points(offsets, valid & np.isfinite(offsets), capacity)
    count = kept.sum(axis=1)
    rows, index = np.arange(n), np.arange(m)
    values = np.concatenate([np.where(kept, offsets, np.nan), np.full((n, 1), np.nan)], axis=1)
    # Each point's next kept point (m: none), and the pairs of consecutive kept points that bracket the
    # position. Searching from the newest pair: for an offset held over a flat run, the latest time the
    # end offset stood there.
    following = np.minimum.accumulate(np.where(kept, index, m)[:, ::-1], axis=1)[:, ::-1]
    following = np.concatenate([following[:, 1:], np.full((n, 1), m)], axis=1)
    pairs = (kept & (following < m) & (offsets <= position[:, None])
             & (position[:, None] <= np.take_along_axis(values, following, axis=1)))
    bracketed = pairs.any(axis=1)
    first, last = np.argmax(kept, axis=1), m - 1 - np.argmax(kept[:, ::-1], axis=1)
    newest = values[rows, last]
    left = np.where(bracketed, m - 1 - np.argmax(pairs[:, ::-1], axis=1), first)
    right = np.where(bracketed, following[rows, left], last)
    left_offset, right_offset = values[rows, left], values[rows, np.minimum(right, m - 1)]
    at = times.astype(np.float64)
    left_ts, right_ts = at[rows, left], at[rows, np.minimum(right, m - 1)]
    offset_span = right_offset - left_offset
    product = (right_offset - position) * (right_ts - left_ts)
    with np.errstate(divide="ignore", invalid="ignore"):
        predicted = np.where(offset_span == 0, left_ts, right_ts - product / offset_span)
        seconds = (now_ms - predicted) / 1000.0
    seconds = np.where(seconds > 0, seconds, 0.0)
    interpolated = (count >= 2) & (position < newest)
    exact &= ~(interpolated & ~(np.abs(product) < EXACT_BELOW))
    out = np.where(interpolated, seconds, np.nan)
    caught_up = (count >= 1) & (position >= newest)
    out = np.where(caught_up, 0.0, out)
    out = np.where(np.isnan(position), np.nan, out)
    out = np.where(lag <= 0, 0.0, out)  # NaN lag compares False: none known
    local = np.isnan(position) | caught_up | bracketed
    return LagSeconds(out, exact, local)


@dataclass
class Verdicts:
    """Burrow's rules over each row's newest observations (lag_evaluation._evaluation's fields)."""

    reason: np.ndarray  # int8 codes into REASONS; judged only where `observed`
    observed: np.ndarray  # bool: a row with no observation gets no verdict
    count: np.ndarray  # observations in the window
    current_lag: np.ndarray  # float64 (integral)
    start: np.ndarray  # (n, 3) float64: the oldest observation's ts, offset, lag
    end: np.ndarray  # (n, 3) the newest's
    exact: np.ndarray


def burrow(ts: np.ndarray, offsets: np.ndarray, lags: np.ndarray, valid: np.ndarray, intervals: int,
           current_lag: np.ndarray, now_ms: np.ndarray, stop_after_ms: np.ndarray, stall_after_ms: np.ndarray,
           allowed_lag: np.ndarray) -> Verdicts:
    """Each row's rules over its newest `intervals` valid observations (time order, oldest first): ts,
    offsets (truncated lasts) and lags (0 where the window had none); `current_lag` NaN: the newest
    observation's lag."""
    n, m = ts.shape
    window = valid & (np.cumsum(valid[:, ::-1], axis=1)[:, ::-1] <= intervals)
    count = window.sum(axis=1)
    observed = count > 0
    index = np.arange(m)
    first = np.argmax(window, axis=1)
    last = m - 1 - np.argmax(window[:, ::-1], axis=1)
    rows = np.arange(n)
    start = np.stack([ts[rows, first], offsets[rows, first], lags[rows, first]], axis=1).astype(np.float64)
    end = np.stack([ts[rows, last], offsets[rows, last], lags[rows, last]], axis=1).astype(np.float64)
    current = np.where(np.isnan(current_lag), end[:, 2], current_lag)
    current = np.where(current > 0, current, 0.0)
    inf = np.inf
    span = end[:, 0] - start[:, 0]
    silence = now_ms - end[:, 0]
    high = np.where(window, offsets, -inf).max(axis=1, initial=-inf)
    low = np.where(window, offsets, inf).min(axis=1, initial=inf)
    lowest_lag = np.where(window, lags, inf).min(axis=1, initial=inf)
    # Lag never decreased: each kept lag >= the kept one before it.
    before = _shift_right(np.maximum.accumulate(np.where(window, index, -1), axis=1), -1)
    previous = np.take_along_axis(np.concatenate([np.full((n, 1), -inf), lags], axis=1), before + 1, axis=1)
    rising = ~np.any(window & (lags < previous), axis=1)
    reason = np.full(n, OK, np.int8)
    undecided = current > allowed_lag
    for hit, code in (((silence > span) & (silence > stop_after_ms), STOP), (high > end[:, 1], REWIND),
                      (lowest_lag <= allowed_lag, OK), ((low == high) & (span >= stall_after_ms), STALL),
                      (rising, WARN)):
        decided = undecided & hit
        reason[decided] = code
        undecided &= ~hit
    exact = ~(np.abs(current_lag) >= EXACT_BELOW) & np.all(
        ~window | ((np.abs(offsets) < EXACT_BELOW) & (np.abs(lags) < EXACT_BELOW)), axis=1)
    return Verdicts(reason, observed, count, current, start, end, exact)
