"""Windows packed into one int64 (window_ids): in the order of their columns, whatever their spread, and
joined as a left outer join joins them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aggregator.window_ids import WindowIds, left_join


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


def test_left_join_gives_every_match_and_unmatched_rows_once():
    rng = np.random.default_rng(2)
    for right_size in (0, 1, 30):
        left, right = rng.integers(0, 20, 40), rng.integers(0, 20, right_size)
        rows, matches = left_join(left, right)
        pairs = sorted(zip(rows.tolist(), matches.tolist(), strict=True))
        expected = sorted([(i, j) for i, k in enumerate(left) for j, r in enumerate(right) if r == k]
                          + [(i, -1) for i, k in enumerate(left) if k not in set(right.tolist())])
        assert pairs == expected
    unique = np.array([5, 3, 9])
    rows, matches = left_join(np.array([9, 4, 5]), unique)
    assert rows.tolist() == [0, 1, 2] and matches.tolist() == [2, -1, 0]
