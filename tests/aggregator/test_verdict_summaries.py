"""A replication's verdicts as columns (aggregator.verdict_summaries): their summary is the one the pure
function gives, and a batch's verdicts replace the kept ones as records would (newest ts wins)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import verdict_summaries
from aggregator.partition_verdicts import ReplicationVerdicts
from aggregator.verdict_summaries import VerdictColumns
from contract import lag_verdicts
from contract.redis_layout import encode_latest

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
    # As written: the columns' problems are read back from the verdicts' JSON (a NaN there is null).
    assert (encode_latest(verdict_summaries.summary_record(unique, T0 + at))
            == encode_latest(lag_verdicts.summary_record(unique, T0 + at)))


def _columns(records):
    fields = [lag_verdicts.verdict_field(r["topic"], r["partition"]) for r in records]
    return VerdictColumns.of_records(fields, records)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(verdicts(), max_size=8), min_size=1, max_size=5),
       at=st.integers(-10_000, 1_500_000), split=st.integers(0, 8))
def test_batches_applied_to_columns_keep_what_records_would(batches, at, split):
    """Each batch (one verdict a partition, in parts of distinct fields as the arrays and the one-at-a-time
    path give them) replaces a kept verdict when not older; the summary is then the one of the records."""
    kept = ReplicationVerdicts()
    expected: dict[str, dict] = {}
    pair = ("t", "s")
    for records in batches:
        unique = list({(r["topic"], r["partition"]): r for r in records}.values())
        parts = [p for p in (unique[:split], unique[split:]) if p]
        fresh = VerdictColumns.joined([_columns(p) for p in parts]) if parts else VerdictColumns.empty()
        updated = kept.updated({pair: fresh})
        kept.commit(updated)
        for r in unique:
            name = lag_verdicts.verdict_field(r["topic"], r["partition"])
            if name not in expected or int(expected[name]["ts"]) <= int(r["ts"]):
                expected[name] = r
        assert kept.records()[pair] == {n: json.loads(encode_latest(r)) for n, r in expected.items()}
        assert (encode_latest(kept.known[pair].summary(T0 + at))
                == encode_latest(lag_verdicts.summary_record(list(expected.values()), T0 + at)))

