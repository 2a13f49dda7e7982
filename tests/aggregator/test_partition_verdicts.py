"""Lag verdicts of a batch's partition reports: the newest windows the rules read, not the whole lookback."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.partition_verdicts import batch_verdicts, lookback_of, offset_series, partition_verdict
from aggregator.window_history import WindowHistory
from contract import lag_verdicts
from contract.redis_layout import WindowAggregate

T0 = 1_700_000_000_000
SUBJECT = ("partition", "t", "s", "orders", "3", "")


def windows(starts_values: list[tuple[int, int]]) -> list[WindowAggregate]:
    return [WindowAggregate(T0 + i * 10_000, 1, v, v, v, v, T0 + i * 10_000 + 1) for i, v in starts_values]


_series = st.lists(st.tuples(st.integers(0, 90), st.integers(0, 60)), max_size=70)  # gaps, out of order


@settings(max_examples=300, deadline=None)
@given(stored=st.tuples(_series, _series), batch=st.tuples(_series, _series), ts_window=st.integers(0, 95),
       lag=st.one_of(st.none(), st.integers(-5, 100)), period_ms=st.sampled_from([None, 5_000, 30_000]))
def test_a_verdict_reads_what_the_whole_lookback_gives(stored, batch, ts_window, lag, period_ms):
    record = {"ts": T0 + ts_window * 10_000 + 500, "topic": "orders", "partition": 3, "records_lag": lag,
              "period_ms": period_ms}
    history = WindowHistory(10_000_000)
    for series, kept, fresh in zip(offset_series(SUBJECT), stored, batch, strict=True):
        history.load(series, 0, windows(kept))
        history.merge(series, windows(fresh))

    high = record["ts"]
    offsets, lags = (history.view(s, high - lookback_of(record), high) for s in offset_series(SUBJECT))
    whole = partition_verdict(record, offsets, lags, 1.5)
    expected = {} if whole is None else {("t", "s"): {lag_verdicts.verdict_field("orders", 3): whole}}
    assert batch_verdicts([(SUBJECT, record, 1.5)], history.view) == expected
