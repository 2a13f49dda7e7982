"""partition_lag._named: a column of hash keys named once a distinct (target, source, topic or group) gives
what naming each row does, whatever the names hold (NUL, separators, unicode, nulls) and however many
distinct values each column has."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import partition_lag
from contract import redis_layout as layout

_name = st.one_of(st.sampled_from(["west", "east", "a\x00b", "a", "b|c", "é", ""]), st.text(max_size=4))
_row = st.tuples(_name, _name, _name)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=40), nulls=st.booleans())
def test_named_once_a_distinct_row_is_named_a_row_at_a_time(rows, nulls):
    columns = [list(c) for c in zip(*rows, strict=True)]
    if nulls:
        columns[2][0] = None
    name = (lambda t, s, g: f"{t}|{s}|{g}") if nulls else layout.group_latest_key
    got = partition_lag._named(name, *(pa.array(c, pa.string()) for c in columns))
    assert got.to_pylist() == [name(*r) for r in zip(*columns, strict=True)]


def test_named_columns_of_many_distinct_values_do_not_overflow():
    n = 10_000  # five columns of 10,000 distinct values: 10^20 combinations, past int64
    columns = [pa.array([f"{k}-{(i * (k + 1)) % n}" for i in range(n)]) for k in range(5)]
    got = partition_lag._named(lambda *parts: "|".join(parts), *columns)
    assert got.to_pylist() == ["|".join(r) for r in zip(*(c.to_pylist() for c in columns), strict=True)]
