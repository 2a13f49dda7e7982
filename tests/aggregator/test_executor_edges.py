"""The executor's function (partition_partials.PartitionPartials: parse, rules, partial windows) is total:
whatever a record's bytes, it is counted valid or invalid, and the valid records' partials are what
they would be without the others. Pure Arrow, no Spark: the function as mapInArrow runs it.

Before: one record with an integer past float64's exact range (2^53 + 1) failed the task at the cast of
the partial windows, so Spark replayed the batch and failed again for as long as the record was kept;
a latency summary of avg 1e308 x count 10 made the window's sum infinite; a writer of
`srm-metrics.east.internal` could report as any source.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.partition_partials import CollectedParts, PartitionPartials, collect
from aggregator.raw_records import flat_table
from aggregator.window_partials import STATS, records_of
from contract.records import raw_metrics
from contract.records.raw_metrics import MAX_NUMBER, GroupMetrics, LatencySummary, PartitionMetrics
from contract.redis_layout import INVALID_RECORDS_METRIC

T0 = 1_700_000_000_000  # a 10 s boundary
NOW = T0 + 60_000  # the aggregator's clock
TOPIC = "srm-metrics.east.internal"


def kafka_rows(values: Sequence[bytes | None], kafka_ts: int = T0) -> pa.Table:
    return pa.table({"topic": [TOPIC] * len(values), "partition": pa.array([0] * len(values), pa.int32()),
                     "offset": pa.array(range(len(values)), pa.int64()),
                     "kafka_ts": pa.array([kafka_ts] * len(values), pa.int64()),
                     "value": pa.array(values, pa.binary())})


def run(values: Sequence[bytes | None], kafka_ts: int = T0) -> CollectedParts:
    """The executor's function over one Kafka partition's records, and its answer as the driver reads it."""
    parts = list(PartitionPartials("west", None, NOW)(iter(kafka_rows(values, kafka_ts).to_batches())))
    return collect(pa.Table.from_batches(parts, schema=parts[0].schema) if parts else pa.table({}))


def report(i: int = 0, **fields: object) -> bytes:
    record = PartitionMetrics(ts=T0 + 1000 * i, period_ms=1000, source="east", target="west",
                              topic="east.orders", upstream_topic="orders", partition=i % 3, record_count=i,
                              byte_count=10 * i, records_lag=i % 4, source_end_offset=100 * i,
                              replication_latency_ms=LatencySummary(1, 9, 4.5, 3, 2 + i))
    return json.dumps(json.loads(raw_metrics.encode(record)[1]) | fields).encode()


def invalid_count(parts: CollectedParts) -> int:
    windows = parts.partials.windows
    return int(pc.sum(windows[f"{INVALID_RECORDS_METRIC}__n"]).as_py() or 0)


def valid_windows(parts: CollectedParts) -> list[dict]:
    """The valid records' windows, in a fixed order, without the invalid-records metric."""
    windows = parts.partials.windows
    windows = windows.filter(pc.not_equal(windows["kind"], "invalid"))
    dropped = [f"{INVALID_RECORDS_METRIC}__{s}" for s in (*STATS, "last_ts")]
    rows = windows.drop_columns(dropped).to_pylist()
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in ("level", "kind", "group", "topic",
                                                                  "partition", "window_start")))


def latency(**summary: object) -> bytes:
    parts = {"min": 1, "max": 9, "avg": 4, "last": 3, "count": 5} | summary
    return report(1, replication_latency_ms=parts)


EDGES = {
    "record_count 2^53+1": report(1, record_count=2**53 + 1),
    "byte_count 2^62": report(1, byte_count=2**62),
    "records_lag 2^60": report(1, records_lag=2**60),
    "source_end_offset -2^63": report(1, source_end_offset=-(2**63)),
    "latency count 2^53+1": latency(count=2**53 + 1),
    "latency avg 1e308": latency(avg=1e308, count=10),
    "latency max -1e300": latency(max=-1e300),
}


@pytest.mark.parametrize("value", EDGES.values(), ids=EDGES.keys())
def test_numbers_past_max_number_are_invalid_and_fail_nothing(value: bytes) -> None:
    good = [report(i) for i in range(6)]
    mixed = run([*good[:3], value, *good[3:]])
    assert invalid_count(mixed) == 1
    assert valid_windows(mixed) == valid_windows(run(good))
    for column in mixed.partials.windows.column_names:
        if pa.types.is_floating(mixed.partials.windows[column].type):
            assert pc.all(pc.fill_null(pc.is_finite(mixed.partials.windows[column]), True)).as_py(), column


def test_numbers_at_max_number_are_kept_exactly_and_their_sums_finite() -> None:
    parts = run([report(0, record_count=MAX_NUMBER, source_end_offset=-MAX_NUMBER),
                 latency(avg=MAX_NUMBER, min=-MAX_NUMBER, max=MAX_NUMBER, count=MAX_NUMBER)])
    assert invalid_count(parts) == 0
    own = {r["partition"]: r for r in parts.partials.windows.to_pylist() if r["level"] == "p"}
    assert own[0]["record_count__sum"] == MAX_NUMBER and own[0]["source_end_offset__min"] == -MAX_NUMBER
    assert own[1]["replication_latency_ms__n"] == MAX_NUMBER
    assert math.isfinite(own[1]["replication_latency_ms__sum"])
    latest = records_of(parts.partials.latest)
    assert {r["partition"]: r["source_end_offset"] for r in latest} == {0: -MAX_NUMBER, 1: 100}


def test_an_invalid_records_kafka_timestamp_past_float64s_exact_range_fails_nothing() -> None:
    # An unparseable record's window is its Kafka timestamp's, which a producer sets (CreateTime).
    parts = run([b"junk", b'{"v":1}'], kafka_ts=2**53 + 1)
    assert invalid_count(parts) == 2


def test_a_record_naming_another_source_than_its_topics_is_invalid() -> None:
    forged = report(2, source="west", target="east")
    parts = run([report(1), forged, report(1, source="elsewhere"), report(3)])
    assert invalid_count(parts) == 2
    assert {(r["source"], r["kind"]) for r in parts.partials.windows.to_pylist()} == {
        ("east", "partition"), ("east", "invalid")}


# --- The property: generated records mixing every JSON type at the edges of int64 and float64. ---

EXAMPLES = int(os.environ.get("SRM_FUZZ_EXAMPLES", "200"))
EDGE_NUMBERS = [0, -1, 1, 2**31 - 1, -(2**31), 2**31, MAX_NUMBER, -MAX_NUMBER, 2**53, 2**53 + 1, -(2**53) - 1,
                2**62, 2**63 - 1, -(2**63), 2**63, 2**64 + 1, 10**30, 0.5, -0.0, 5e-324, 2.0**53, 1e16,
                1.7976931348623157e308, -1.7976931348623157e308, 1e308, float("nan"), float("inf"),
                float("-inf")]
JSON_VALUES = st.one_of(st.sampled_from(EDGE_NUMBERS), st.integers(), st.floats(), st.booleans(), st.none(),
                        st.text(max_size=8), st.sampled_from(["", "1", "east", "*", "\ud800"]),
                        st.lists(st.integers(), max_size=2),
                        st.dictionaries(st.sampled_from(["min", "count", "x"]), st.integers(), max_size=2))
FIELDS = sorted(raw_metrics.FIELD_TYPES)
SUMMARY_PARTS = ["min", "max", "avg", "last", "count"]


def group_report(i: int) -> bytes:
    return raw_metrics.encode(GroupMetrics(
        ts=T0 + 500 * i, period_ms=1000, source="east", target="west", group=f"g{i % 2}", topic="east.orders",
        upstream_topic="orders", partition=i % 2, checkpoint_latency_ms=LatencySummary(2, 3, 2.5, 2, 1 + i),
        group_upstream_offset=i, group_downstream_offset=MAX_NUMBER - i, group_lag=i))[1]


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes | None, str]:
    """A record value, and what it is: a report as the driver writes it (`good`), one whose fields of its
    kind were changed (`mutated`: the contract's decode judges it too), or anything else (`other`)."""
    i = draw(st.integers(0, 30))
    value = draw(st.sampled_from([report, group_report]))(i)
    how = draw(st.sampled_from(["as is", "field", "summary part", "unknown field", "bytes", "cut", "null"]))
    body = json.loads(value)
    if how == "as is":
        return value, "good"
    if how == "field":
        body[draw(st.sampled_from([f for f in raw_metrics.KIND_FIELDS[body["kind"]] if f != "kind"]))] = \
            draw(JSON_VALUES)
    elif how == "summary part":
        name = "replication_latency_ms" if body["kind"] == "partition" else "checkpoint_latency_ms"
        body[name][draw(st.sampled_from(SUMMARY_PARTS))] = draw(JSON_VALUES)
    elif how == "unknown field":  # another kind's or none's: ignored, whatever its value
        body[draw(st.sampled_from([*FIELDS, "x"]))] = draw(JSON_VALUES)
    elif how == "bytes":
        return draw(st.binary(max_size=64)), "other"
    elif how == "null":
        return None, "other"
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate as the bytes of one (not UTF-8)
    if how == "cut":
        return data[:draw(st.integers(0, len(data) - 1))], "other"
    return data, "mutated" if how in ("field", "summary part") else "other"


def decodes(value: bytes | None) -> bool:
    try:
        raw_metrics.decode(value if value is not None else b"")
    except raw_metrics.RawMetricsError:
        return False
    return True


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(picks=st.lists(records(), min_size=1, max_size=24))
def test_the_executor_function_never_raises_and_bad_records_change_no_good_ones_partials(
        picks: list[tuple[bytes | None, bool]]) -> None:
    values = [value for value, _ in picks]
    mixed = run(values)  # raises nothing
    kinds = flat_table(kafka_rows(values), "west", NOW)["kind"].to_pylist()  # the function's own verdicts
    valid = [value for value, kind in zip(values, kinds, strict=True) if kind != "invalid"]
    assert invalid_count(mixed) == len(values) - len(valid)
    for (value, what), kind in zip(picks, kinds, strict=True):
        if what == "good":
            assert kind != "invalid", value
        # What the contract refuses is never valid here (here refuses more: a ts far ahead, say).
        if what == "mutated" and kind != "invalid":
            assert decodes(value), value
    if valid:
        alone = run(valid)
        assert valid_windows(mixed) == valid_windows(alone)
        assert sorted(map(str, records_of(mixed.partials.latest))) == \
            sorted(map(str, records_of(alone.partials.latest)))
