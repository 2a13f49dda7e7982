"""The JSON parse of raw-metrics values a kind at a time (raw_values), against one read with every field
of every kind (what it replaced): the same rows, in the values' order, whatever the mix of kinds."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator import raw_values
from aggregator.raw_values import _PARSE, RECORD_SCHEMA, _read, parse_values
from contract.records import raw_metrics
from contract.records.raw_metrics import (
    KIND_FIELDS,
    GroupMetrics,
    LatencySummary,
    PartitionMetrics,
    ReaderHealth,
    ReplicationMetrics,
)

T0 = 1_700_000_000_000


def partition(i: int) -> bytes:
    return raw_metrics.encode(PartitionMetrics(
        ts=T0 + i, period_ms=1000, source="east", target="west", topic="east.orders", upstream_topic="orders",
        partition=i % 7, record_count=i, byte_count=10 * i, records_lag=i % 5,
        replication_latency_ms=LatencySummary(1, 9, 4, 3, i), source_end_offset=100 * i))[1]


def group(i: int) -> bytes:
    return raw_metrics.encode(GroupMetrics(
        ts=T0 + i, period_ms=1000, source="east", target="west", group=f"g{i % 3}", topic="east.orders",
        upstream_topic="orders", partition=i % 7, checkpoint_latency_ms=LatencySummary(2, 3, 2.5, 2, 1),
        group_upstream_offset=i, group_downstream_offset=i + 1, group_lag=i % 4))[1]


def replication(i: int) -> bytes:
    return raw_metrics.encode(ReplicationMetrics(
        ts=T0 + i, period_ms=1000, source="east", target="west", status="RUNNING", workers=2, tasks=i % 4,
        readers={"progress": ReaderHealth(i, True, "x[0]@1: bad")}))[1]


def hostile(i: int) -> bytes:
    """Records whose kind is not where a text search finds it first, or not at all."""
    body = json.loads(group(i))
    return [
        json.dumps({**body, "note": {"kind": "partition"}}, separators=(",", ":")),  # kind text nested
        json.dumps({"note": {"kind": "replication"}, **body}, separators=(",", ":")),  # ... and first
        json.dumps({**body, "kind": "unknown"}, separators=(",", ":")),
        json.dumps({k: v for k, v in body.items() if k != "kind"}),
        json.dumps({**body, "kind": "group"}),  # a space after the colon: no text match
        json.dumps({**body, "error": '"kind":"replication"'}, separators=(",", ":")),  # escaped quotes
    ][i % 6].encode()


MAKERS = (partition, group, replication, hostile)


def full_read(values: list[bytes]) -> pa.Table:
    return _read(pa.array(values, pa.binary()), _PARSE)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(MAKERS), st.integers(0, 1000)), min_size=1, max_size=60))
def test_a_read_by_kind_gives_the_rows_of_one_read_with_every_field(picks: list) -> None:
    values = [make(i) for make, i in picks]
    table, parsed = parse_values(pa.array(values, pa.binary()))
    assert table.schema == RECORD_SCHEMA
    assert parsed.to_pylist() == [True] * len(values)
    expected = full_read(values).to_pylist()
    assert [own_fields(row) for row in table.to_pylist()] == [own_fields(row) for row in expected]


def own_fields(row: dict) -> dict:
    """The fields of the row's kind (of every kind if it names none): the others are not read."""
    return {k: v for k, v in row.items() if k in KIND_FIELDS.get(row["kind"], row)}


def test_a_field_another_kind_carries_is_ignored_like_an_unknown_one() -> None:
    body = json.loads(partition(3)) | {"status": 5, "group": "g1"}  # mistyped for a replication, and a group
    (value,) = values = [json.dumps(body, separators=(",", ":")).encode()]
    table, parsed = parse_values(pa.array(values, pa.binary()))
    assert parsed.to_pylist() == [True]
    row = table.to_pylist()[0]
    assert (row["kind"], row["record_count"], row["status"], row["group"]) == ("partition", 3, None, None)
    assert full_read([value]) is None  # read with every field, the record fails as a whole


def test_a_value_of_its_kind_that_fails_its_read_is_isolated() -> None:
    bad = json.dumps(json.loads(partition(1)) | {"record_count": "many"}, separators=(",", ":")).encode()
    values = [partition(0), group(1), bad, replication(2)]
    table, parsed = parse_values(pa.array(values, pa.binary()))
    assert parsed.to_pylist() == [True, True, False, True]
    assert table["kind"].to_pylist() == ["partition", "group", None, "replication"]


def test_bad_records_among_many_cost_one_more_read_and_a_python_parse_each(monkeypatch) -> None:
    # Before: one bad value made the batch's every value parse in Python, and the lines read again by
    # halves until each bad one stood alone: 2,000 mistyped records cost a 50k batch 25 s, not 0.3.
    bad = [b"junk", b'{"v":1,"kind":"partition","record_count":"many"}', partition(5)[:40], b"[1]",
           json.dumps(json.loads(partition(6)), indent=1).encode()]  # the last one good, pretty-printed
    values = [partition(i) if i % 20 else bad[i // 20 % len(bad)] for i in range(1, 1001)]
    reads, loads = [], []
    read_json, orjson_loads = raw_values.pj.read_json, raw_values.orjson.loads
    def counted_read(*a: Any, **k: Any) -> Any:
        reads.append(1)
        return read_json(*a, **k)

    def counted_loads(*a: Any, **k: Any) -> Any:
        loads.append(1)
        return orjson_loads(*a, **k)

    monkeypatch.setattr(raw_values.pj, "read_json", counted_read)
    monkeypatch.setattr(raw_values.orjson, "loads", counted_loads)
    table, parsed = parse_values(pa.array(values, pa.binary()))
    assert parsed.to_pylist() == [bool(i % 20) or i // 20 % len(bad) == 4 for i in range(1, 1001)]
    assert table["record_count"].to_pylist()[19::20] == [None, None, None, 6, None] * 10
    assert len(loads) == 30  # the bad ones that may be JSON objects (and the pretty one) only
    assert len(reads) <= 2  # one read of the lines that failed, one of the lines screened
