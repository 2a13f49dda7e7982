"""A replication's summary as arrays (aggregator.verdict_summaries) is the one the pure function gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import verdict_summaries
from contract import lag_verdicts

T0 = 1_700_000_000_000
_status = st.sampled_from([("OK", "OK"), ("WARN", "WARN"), ("ERR", "STOP"), ("ERR", "STALL"),
                           ("ERR", "REWIND")])


@st.composite
def verdicts(draw):
    status, reason = draw(_status)
    end = draw(st.one_of(st.none(), st.integers(0, 600_000)))
    start = None if end is None else end - draw(st.integers(0, 300_000))

    def observation(ts):
        return None if ts is None else [T0 + ts, draw(st.integers(0, 99)), draw(st.integers(0, 9))]

    return {"ts": T0 + draw(st.integers(0, 700_000)), "topic": draw(st.sampled_from(["a", "b", "c"])),
            "partition": draw(st.integers(0, 5)), "status": status, "reason": reason,
            "complete": draw(st.sampled_from([0.1, 0.5, 1.0])),
            "current_lag": draw(st.one_of(st.integers(-2, 40), st.integers(2**53 - 2, 2**53 + 2))),
            "start": observation(start), "end": observation(end),
            "stop_after_ms": draw(st.sampled_from([0, 3_000, 90_000])),
            "allowed_lag": draw(st.integers(0, 3)),
            "lookback_ms": draw(st.sampled_from([0, 20_000, 600_000])),
            "lag_seconds": draw(st.one_of(st.none(), st.floats(0, 1e6), st.just(float("nan")),
                                          st.booleans(), st.integers(0, 9)))}


@settings(max_examples=500, deadline=None)
@given(records=st.lists(verdicts(), max_size=12), at=st.integers(-10_000, 1_500_000))
def test_the_summary_as_arrays_is_the_pure_functions(records, at):
    # One verdict a partition, as a replication's hash holds them.
    unique = list({(r["topic"], r["partition"]): r for r in records}.values())
    assert verdict_summaries.summary_record(unique, T0 + at) == lag_verdicts.summary_record(unique, T0 + at)
