"""Windows and metric windows as one int64 each, so the merge joins and sorts them with numpy.

The merge (stored_windows) joined its tables on (series, metric, start) with Acero: ~20 joins a batch,
a quarter of the merge's CPU. A window (series, start) packed into one integer whose order is theirs,
and a metric window into window * METRICS + metric, make those joins a sort and a binary search.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from aggregator.window_partials import one_array
from contract import redis_layout as layout

# Codes below this per column keep window * METRICS + metric inside int64 (2 * 29 + 4 bits).
_CODE_LIMIT = 1 << 29
METRICS = 16
assert len(layout.WINDOW_METRICS) <= METRICS


def _codes(columns: Sequence[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """The values of every column as codes from 0 in the same order, and how many codes there are."""
    filled = [c for c in columns if len(c)]
    if not filled:
        return [c.astype(np.int64) for c in columns], 1
    low = min(int(c.min()) for c in filled)
    span = max(int(c.max()) for c in filled) - low + 1
    if span < _CODE_LIMIT:
        return [c - low for c in columns], span
    # Spread too wide (windows days apart): the distinct values' ranks instead.
    distinct = np.unique(np.concatenate(filled))
    return [np.searchsorted(distinct, c) for c in columns], len(distinct)


class WindowIds:
    """Packs the windows of several tables (series, start[, metric] columns) consistently."""

    def __init__(self, tables: Sequence[pa.Table]) -> None:
        self._series, self._series_span = _codes([int64(t["series"]) for t in tables])
        self._starts, self._start_span = _codes([int64(t["start"]) for t in tables])
        self.windows = [s * self._start_span + t for s, t in zip(self._series, self._starts, strict=True)]

    def metric_windows(self, at: int, table: pa.Table) -> np.ndarray:
        """Table `at`'s metric windows: ordered by series, start, metric."""
        return self.windows[at] * METRICS + _metrics(table)

    def start_metrics(self, at: int, table: pa.Table) -> np.ndarray:
        """Table `at`'s metric windows: ordered by start, series, metric (a window: the value // METRICS)."""
        return (self._starts[at] * self._series_span + self._series[at]) * METRICS + _metrics(table)

    def series_metrics(self, at: int, table: pa.Table) -> np.ndarray:
        """Table `at`'s metric windows: ordered by series, metric, start."""
        return (self._series[at] * METRICS + _metrics(table)) * self._start_span + self._starts[at]


def _metrics(table: pa.Table) -> np.ndarray:
    metric = int64(table["metric"])
    if len(metric) and (metric.min() < 0 or metric.max() >= METRICS):
        raise ValueError(f"metric index out of range: {metric.min()}..{metric.max()}")
    return metric


def int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return one_array(column).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def ascending(keys: np.ndarray) -> bool:
    """Whether packed keys are in strictly ascending order (distinct)."""
    return bool(np.all(keys[1:] > keys[:-1]))


def find(ordered: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The row of each of `keys` in `ordered` (ascending, distinct), -1 where it is not there: a join by
    binary search, costing per key looked up, not per row of `ordered`."""
    at = np.searchsorted(ordered, keys)
    found = at < len(ordered)
    found[found] = ordered[at[found]] == keys[found]
    return np.where(found, at, -1)


def distinct(ordered: np.ndarray) -> np.ndarray:
    """The distinct values of an ascending array."""
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def run_lasts(ordered: np.ndarray) -> np.ndarray:
    """The index of the last row of each run of equal values in an ordered array."""
    if not len(ordered):
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))


def ranges(lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """The indexes lows[i]..highs[i] (excluded) of every i, in turn."""
    lengths = highs - lows
    begins = np.cumsum(lengths) - lengths
    return np.repeat(lows - begins, lengths) + np.arange(int(lengths.sum()))


def take_or_null(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """Rows of `table` by index, all nulls where the index is -1."""
    return table.take(pa.array(rows, pa.int64(), mask=rows < 0))
