"""Subjects numbered a column at a time (window_partials._numbered_subjects) against the numbering of the
columns joined as one text (what it replaced): the same numbers, the same subjects, the same partials,
latest records and merged partials over hostile batches."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import window_partials
from aggregator.raw_records import flat_table, on_time
from contract.records import raw_metrics
from contract.records.raw_metrics import (
    MAX_VALUE_BYTES,
    GroupMetrics,
    LatencySummary,
    PartitionMetrics,
    ReplicationMetrics,
)

T0 = 1_700_000_000_000
NOW = T0 + 60_000


def joined_text_numbering(rows: pa.Table, columns: list[str]) -> tuple[pa.Table, pa.Table]:
    """The replaced numbering, verbatim: the oracle."""
    text = [pc.fill_null(pc.cast(rows[c], pa.string()), "\x00") for c in columns]
    joined = pc.binary_join_element_wise(*text, "\x1f")
    encoded = pc.dictionary_encode(joined).combine_chunks() if isinstance(joined, pa.ChunkedArray) \
        else pc.dictionary_encode(joined)
    firsts = pc.index_in(encoded.dictionary, value_set=joined)
    subjects = rows.select(columns).take(firsts)
    return subjects, rows.drop_columns(columns).append_column("subject", pc.cast(encoded.indices, pa.int64()))


# The joined text took a null for "\x00" and could not tell a "\x1f" in a value from the separator; the
# columns it numbers never hold either (raw_records validates names), so the texts here hold neither.
NAMES = st.one_of(st.none(), st.sampled_from(["", "a", "b", "east", "east.orders", "*", "ä"]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(NAMES, NAMES, st.integers(-2, 3), st.sampled_from([0, 10_000, -10_000])),
                max_size=40),
       st.integers(1, 5))
def test_a_column_at_a_time_numbers_as_the_joined_text(rows: list, chunk: int) -> None:
    table = pa.table({"kind": pa.array(["partition"] * len(rows), pa.string()),
                      "target": pa.array([r[0] for r in rows], pa.string()),
                      "topic": pa.array([r[1] for r in rows], pa.string()),
                      "partition": pa.array([r[2] for r in rows], pa.int32()),
                      "window_start": pa.array([r[3] for r in rows], pa.int64()),
                      "value": pa.array(range(len(rows)), pa.float64())})
    table = pa.Table.from_batches(table.to_batches(max_chunksize=chunk), schema=table.schema)  # chunked
    for columns in (["kind", "target", "topic", "partition", "window_start"], ["topic"], ["kind"]):
        subjects, numbered = window_partials._numbered_subjects(table, columns)
        expected_subjects, expected = joined_text_numbering(table, columns)
        assert subjects.equals(expected_subjects)
        assert numbered.combine_chunks().equals(expected.combine_chunks())


def partition(i: int, ts: int) -> bytes:
    count = i % 4
    return raw_metrics.encode(PartitionMetrics(
        ts=ts, period_ms=1000, source=("east", "north")[i % 2], target="west", topic=f"east.t{i % 3}",
        upstream_topic=f"t{i % 3}", partition=i % 5, record_count=count, byte_count=10 * count,
        records_lag=i % 7, source_end_offset=100 * i,
        replication_latency_ms=LatencySummary(1, 9, 4.5, 0.1 * i, count) if count else None))[1]


def group(i: int, ts: int) -> bytes:
    return raw_metrics.encode(GroupMetrics(
        ts=ts, period_ms=1000, source="east", target="west", group=f"g{i % 3}", topic=f"east.t{i % 2}",
        upstream_topic=f"t{i % 2}", partition=i % 3, checkpoint_latency_ms=LatencySummary(2, 3, 2.5, 2, 1),
        group_upstream_offset=i, group_downstream_offset=i + 1, group_lag=i % 4))[1]


def replication(i: int, ts: int) -> bytes:
    return raw_metrics.encode(ReplicationMetrics(ts=ts, period_ms=1000, source="east", target="west",
                                                 status="RUNNING", workers=2, tasks=i % 4))[1]


def hostile(i: int, ts: int) -> bytes:
    """Bad JSON, wrong types, oversize values, another target, invalid counts and names."""
    body = json.loads(partition(i, ts))
    bad = [
        b"{not json", b"", b"[1,2]", b'{"v":1,"kind":"partition"}',
        json.dumps({**body, "partition": "3"}).encode(),
        json.dumps({**body, "record_count": -1}).encode(),
        json.dumps({**body, "target": "elsewhere"}).encode(),
        json.dumps({**body, "topic": "a\x1fb"}).encode(),
        json.dumps({**body, "group": "g\x1fh", "kind": "group"}).encode(),
        json.dumps({**body, "ts": NOW + 3_600_000}).encode(),
        json.dumps({**body, "pad": "x" * MAX_VALUE_BYTES}).encode(),
        json.dumps(body, indent=1).encode(),  # on several lines: still valid
    ]
    return bad[i % len(bad)]


MAKERS = (partition, group, replication, hostile)


# A hostile task batch: records of every kind (subject, ~1 s step, Kafka partition), a watermark or none.
PICKS = st.lists(
    st.tuples(st.sampled_from(MAKERS), st.integers(0, 50), st.integers(0, 40), st.integers(0, 1)),
    min_size=1, max_size=80)
WATERMARKS = st.sampled_from([None, T0 + 20_000])


def picked_records(picks: list, watermark_ms: int | None) -> pa.Table:
    """The picked records as a task's on-time flat table (what window_partials is given)."""
    values = [make(i, T0 + 997 * step) for make, i, step, _ in picks]
    kafka = pa.table({"topic": ["srm-metrics.east.internal"] * len(values),
                      "partition": pa.array([p for *_, p in picks], pa.int32()),
                      "offset": pa.array(range(len(values)), pa.int64()),
                      "kafka_ts": pa.array([T0 + 20_000] * len(values), pa.int64()),
                      "value": pa.array(values, pa.binary())})
    return on_time(flat_table(kafka, "west", NOW), watermark_ms)


@settings(max_examples=40, deadline=None)
@given(PICKS, WATERMARKS)
def test_partials_and_latest_records_are_those_of_the_joined_text(picks: list, watermark_ms: int | None) \
        -> None:
    flat = picked_records(picks, watermark_ms)
    if flat.num_rows == 0:  # every record late: no partials (partition_partials)
        return
    halves = [flat.slice(0, flat.num_rows // 2), flat.slice(flat.num_rows // 2)]

    def outputs() -> list[pa.Table]:
        parts = [window_partials.window_partials(half) for half in halves if half.num_rows]
        return [window_partials.window_partials(flat), window_partials.latest_table(flat),
                window_partials.merge_partials(parts)]

    new = outputs()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_partials, "_numbered_subjects", joined_text_numbering)
        old = outputs()
    for got, expected in zip(new, old, strict=True):
        assert got.equals(expected)
