"""A replication's verdicts as columns (aggregator.verdict_summaries): their summary is the one the pure
function gives, also combined from parts made apart (a task's each)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import verdict_summaries
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
@given(records=st.lists(verdicts(), max_size=14), at=st.integers(-10_000, 1_500_000),
       tasks=st.lists(st.integers(0, 2), min_size=14, max_size=14),
       held=st.lists(st.booleans(), min_size=14, max_size=14))
def test_parts_made_apart_combine_into_the_summary_of_all(records, at, tasks, held):
    """A replication's partitions judged in several tasks: each task's parts (over columns whose JSON it
    holds or reads back) combined are the summary over every verdict at once."""
    unique = list({(r["topic"], r["partition"]): r for r in records}.values())
    parts = []
    for task in range(3):
        mine = [r for k, r in enumerate(unique) if tasks[k] == task]
        columns = _columns(mine)
        texts = list(columns.text)
        for k in range(len(mine)):
            if not held[k]:
                columns.text[k] = None
        parts.append(columns.parts(T0 + at, lambda rows, texts=texts: [texts[r] for r in rows]))
    assert (encode_latest(lag_verdicts.combined_summary(parts, T0 + at))
            == encode_latest(lag_verdicts.summary_record(unique, T0 + at)))
