"""Windows packed into one int64 (window_ids): in the order of their columns, whatever their spread, and
found by binary search."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aggregator.window_ids import WindowIds, ascending, distinct, find, ranges


def test_packed_windows_keep_the_order_of_series_start_and_metric():
    rng = np.random.default_rng(1)
    for spread in (10_000, 1 << 40):  # windows minutes apart, and years apart (ranked, not offset)
        tables = [pa.table({"series": rng.integers(0, 50, 500), "metric": rng.integers(0, 15, 500),
                            "start": rng.integers(0, 40, 500) * spread - 20 * spread}) for _ in range(2)]
        ids = WindowIds(tables)
        rows = [(s, t, m) for table in tables for s, t, m in zip(
            *(table[c].to_pylist() for c in ("series", "start", "metric")), strict=True)]
        by_start = np.concatenate([ids.metric_windows(i, t) for i, t in enumerate(tables)])
        by_metric = np.concatenate([ids.series_metrics(i, t) for i, t in enumerate(tables)])
        for packed, key in ((by_start, lambda r: r), (by_metric, lambda r: (r[0], r[2], r[1]))):
            for a, b in zip(*(rng.integers(0, len(rows), 2_000) for _ in range(2)), strict=True):
                assert (packed[a] < packed[b]) == (key(rows[a]) < key(rows[b]))
                assert (packed[a] == packed[b]) == (rows[a] == rows[b])


def test_a_join_by_binary_search_finds_each_key_or_none():
    rng = np.random.default_rng(2)
    for size in (0, 1, 30):
        ordered = np.unique(rng.integers(0, 40, size))
        keys = rng.integers(-5, 45, 60)
        rows = find(ordered, keys)
        assert [r if r < 0 else int(ordered[r]) for r in rows.tolist()] == \
            [k if k in set(ordered.tolist()) else -1 for k in keys.tolist()]
    assert ascending(np.array([1, 4, 9])) and not ascending(np.array([1, 4, 4]))
    assert distinct(np.array([1, 1, 4, 9, 9])).tolist() == [1, 4, 9]
    assert ranges(np.array([2, 7, 7]), np.array([4, 7, 10])).tolist() == [2, 3, 7, 8, 9]
