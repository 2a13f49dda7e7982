"""A task's partial windows aggregated as runs of the sorted records (window_partials._runs_aggregated)
against Arrow's hash aggregation it replaced: the same table, value for value and bit for bit (sums added
in the same order, nulls where a window has no value), over hostile batches and over many records a window
with values of every magnitude."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import window_partials
from tests.aggregator.test_subject_numbers import PICKS, T0, WATERMARKS, picked_records


def both(compute):
    """compute() with the runs, then with Arrow's aggregation alone."""
    new = compute()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_partials, "_runs_aggregated", lambda *args: None)
        old = compute()
    return new, old


def assert_same(new: pa.Table, old: pa.Table) -> None:
    assert new.schema == old.schema
    assert new.num_rows == old.num_rows
    for name in new.column_names:
        a, b = new[name].combine_chunks(), old[name].combine_chunks()
        assert a.is_valid().equals(b.is_valid()), name
        if pa.types.is_floating(a.type):  # bit for bit: -0.0 and 0.0 differ, NaN equals itself
            bits = [np.asarray(c.fill_null(0.0).to_numpy(zero_copy_only=False)).view(np.int64)
                    for c in (a, b)]
            assert (bits[0] == bits[1]).all(), name
        else:
            assert a.equals(b), name


@settings(max_examples=60, deadline=None)
@given(PICKS, WATERMARKS)
def test_runs_give_the_partials_of_arrows_aggregation(picks: list, watermark_ms: int | None) -> None:
    flat = picked_records(picks, watermark_ms)
    if flat.num_rows == 0:
        return
    assert_same(*both(lambda: window_partials.window_partials(flat)))


FLOATS = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.sampled_from([0.0, -0.0, 1e300, -1e-300, 0.1, 3.0, math.nan]))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 30), FLOATS, FLOATS,
                          st.sampled_from([None, "t1", "t2", "a"])), min_size=1, max_size=120),
       st.randoms(use_true_random=False))
def test_many_records_a_window_sum_in_the_same_order(rows: list, random) -> None:
    """Own-level sample rows (as window_partials._own_rows makes them) of a few subjects, many records a
    window at distinct ts, in any order: NaN and -0.0 go to Arrow's aggregation, the rest to the runs."""
    seen: set[tuple[int, int]] = set()
    kept = []
    for subject, window, step, a, b, upstream in rows:
        ts = T0 + window * 10_000 + step * 300
        if (subject, ts) not in seen:  # one ts a record of a subject (_one_row_a_ts handles the others)
            seen.add((subject, ts))
            kept.append((subject, ts, a, b, upstream))
    random.shuffle(kept)
    n = len(kept)

    def column(values: list) -> pa.Array:
        return pa.array(values, pa.float64())

    metric = "record_count"
    table = pa.table({
        "kind": ["partition"] * n, "target": ["west"] * n, "source": ["east"] * n, "group": [""] * n,
        "topic": pa.array([f"east.t{k[0] % 2}" for k in kept], pa.string()),
        "partition": pa.array([k[0] for k in kept], pa.int32()),
        "upstream_topic": pa.array([k[4] for k in kept], pa.string()),
        "ts": pa.array([k[1] for k in kept], pa.int64()),
        "window_start": pa.array([(k[1] - T0) // 10_000 * 10_000 + T0 for k in kept], pa.int64()),
        f"{metric}__n": column([None if k[2] is None else 1.0 for k in kept]),
        f"{metric}__sum": column([k[2] for k in kept]), f"{metric}__min": column([k[3] for k in kept]),
        f"{metric}__max": column([k[2] for k in kept]), f"{metric}__last": column([k[3] for k in kept]),
        "level": ["p"] * n})
    used: list[bool] = []
    runs = window_partials._runs_aggregated

    def spied(*args):
        out = runs(*args)
        used.append(out is not None)
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_partials, "_runs_aggregated", spied)
        assert_same(*both(lambda: window_partials._subject_windows(table, [metric])))
    plain = all(v is None or (v == v and not (v == 0 and math.copysign(1, v) < 0))
                for k in kept for v in k[2:4])
    assert used[0] == plain  # the runs unless a value is NaN or -0.0
