"""Raw records -> flat rows -> partial windows, fed Kafka-shaped Arrow rows (what a micro-batch hands the
sink): parsing, validity and the partial-window math. Pure Arrow, no Spark."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pytest

from aggregator import window_partials as wp
from aggregator.latest_values import replication_latest
from aggregator.raw_records import MAX_FUTURE_SKEW_MS, flat_table, late_counts, on_time
from contract.records import raw_metrics
from contract.records.raw_metrics import GroupMetrics, LatencySummary, PartitionMetrics, ReplicationMetrics
from contract.redis_layout import ALL_TOPICS, INVALID_RECORDS_METRIC, WHOLE_TOPIC

T0 = 1_700_000_000_000  # a 10 s boundary


def kafka_rows(records: list, garbage: Sequence[bytes | None] = (), kafka_ts: int = T0) -> pa.Table:
    values = [raw_metrics.encode(r)[1] for r in records] + list(garbage)
    return pa.table({"topic": ["srm-metrics.east.internal"] * len(values),
                     "partition": pa.array([0] * len(values), pa.int32()),
                     "offset": pa.array(range(len(values)), pa.int64()),
                     "kafka_ts": pa.array([kafka_ts] * len(values), pa.int64()),
                     "value": pa.array(values, pa.binary())})


def partition_record(ts: int, partition: int, count: int, latency: LatencySummary | None = None,
                     lag: int | None = None) -> PartitionMetrics:
    return PartitionMetrics(ts=ts, period_ms=5000, source="east", target="west", topic="east.orders",
                            upstream_topic="orders", partition=partition, record_count=count,
                            byte_count=count * 100, replication_latency_ms=latency, records_lag=lag)


def flat(records: list, garbage: Sequence[bytes | None] = (), target: str | None = None,
         watermark_ms: int | None = None) -> pa.Table:
    # The aggregator's clock reads T0: the records are as recent as their Kafka timestamps.
    return on_time(flat_table(kafka_rows(records, garbage), target, now_ms=T0), watermark_ms)


def partials(records: list, garbage: Sequence[bytes | None] = (), target: str | None = None,
             watermark_ms: int | None = None) -> list:
    return wp.window_partials(flat(records, garbage, target, watermark_ms)).to_pylist()


def collect(rows: list) -> dict:
    """Rows of east.orders by (partition, window start)."""
    return {(r["partition"], r["window_start"]): r for r in rows if r["topic"] == "east.orders"}


def stats(row, metric: str) -> tuple:
    return tuple(row[f"{metric}__{s}"] for s in ("n", "sum", "min", "max", "last", "last_ts"))


def test_counts_latencies_and_gauges_per_partition_and_topic():
    records = [
        partition_record(T0 + 1000, 0, 10, LatencySummary(1, 5, 2, 3, 10), lag=4),
        partition_record(T0 + 6000, 0, 20, LatencySummary(2, 8, 4, 8, 20), lag=1),
        partition_record(T0 + 3000, 1, 5, None, lag=9),
        partition_record(T0 + 12_000, 0, 7),  # next window
        ReplicationMetrics(ts=T0, period_ms=5000, source="east", target="west", status="RUNNING"),
    ]
    out = collect(partials(records))
    first = out[(0, T0)]
    assert stats(first, "record_count") == (2, 30, 10, 20, 20, T0 + 6000)
    latency = stats(first, "replication_latency_ms")
    assert latency[0] == 30 and latency[1] == pytest.approx(10 * 2 + 20 * 4)
    assert latency[2:5] == (1, 8, 8)
    assert stats(first, "records_lag")[4] == 1
    assert first["record_age_ms__n"] is None  # not reported: no window
    topic = out[(WHOLE_TOPIC, T0)]
    assert stats(topic, "record_count")[:2] == (3, 35)
    # Partitions 0 and 1 report the lag at different times: the newest (T0+6 s) wins.
    assert stats(topic, "records_lag")[4:] == (1, T0 + 6000)
    assert stats(out[(0, T0 + 10_000)], "record_count")[1] == 7
    assert stats(topic, "byte_count")[1] == 3500
    assert first["max_ts"] == T0 + 6000


def test_equal_timestamps_break_ties_by_value():
    records = [partition_record(T0 + 1000, p, 1, lag=lag) for p, lag in ((0, 4), (1, 9), (2, 2))]
    topic = collect(partials(records))[(WHOLE_TOPIC, T0)]
    assert stats(topic, "records_lag")[2:] == (2, 9, 9, T0 + 1000)


def test_replication_level_counters_and_latest_records():
    records = [
        partition_record(T0 + 1000, 0, 10, lag=4),
        PartitionMetrics(ts=T0 + 2000, period_ms=5000, source="east", target="west", topic="east.other",
                         upstream_topic="other", partition=1, record_count=5, byte_count=50, records_lag=2),
        partition_record(T0 + 4000, 0, 1, lag=3),
        ReplicationMetrics(ts=T0 + 4000, period_ms=5000, source="east", target="west", status="RUNNING"),
    ]
    table = flat(records)
    rows = wp.window_partials(table).to_pylist()
    (whole,) = [r for r in rows if r["level"] == "r"]
    assert (whole["topic"], whole["partition"], whole["upstream_topic"]) == (ALL_TOPICS, WHOLE_TOPIC, None)
    assert (whole["record_count__sum"], whole["byte_count__sum"]) == (16, 1150)
    # Lag is merged across topics as a reader merges the topic series: samples 4 and 3 (orders), 2 (other).
    lag = tuple(whole[f"records_lag__{s}"] for s in ("n", "sum", "min", "max", "last"))
    assert lag == (3, 9, 2, 4, 3)
    assert whole["upstream_offset__n"] is None  # offsets do not add up across topics
    latest = {(r["kind"], r["topic"], r["partition"]): r for r in wp.latest_records(table)}
    assert len(latest) == 3
    assert latest[("partition", "east.orders", 0)]["records_lag"] == 3
    assert latest[("partition", "east.orders", 0)]["ts"] == T0 + 4000
    assert latest[("replication", ALL_TOPICS, WHOLE_TOPIC)]["status"] == "RUNNING"
    assert "record_count" not in latest[("replication", ALL_TOPICS, WHOLE_TOPIC)]  # absent, not None
    assert latest[("partition", "east.other", 1)]["upstream_topic"] == "other"


def test_group_metrics_are_keyed_by_group():
    record = GroupMetrics(ts=T0 + 1, period_ms=5000, source="east", target="west", group="billing",
                          topic="east.orders", upstream_topic="orders", partition=2,
                          checkpoint_latency_ms=LatencySummary(3, 3, 3, 3, 1), group_lag=12)
    rows = partials([record])
    assert {(r["group"], r["partition"], r["level"]) for r in rows} == {("billing", 2, "p"),
                                                                          ("billing", WHOLE_TOPIC, "t")}
    assert all(r["group_lag__last"] == 12 and r["checkpoint_latency_ms__n"] == 1 for r in rows)
    assert all(r["record_count__n"] is None for r in rows)


def test_records_that_do_not_parse_are_flagged_not_fatal():
    incomplete = b'{"v": 1, "kind": "partition", "ts": 5, "source": "east", "target": "west"}'
    elsewhere = raw_metrics.encode(PartitionMetrics(
        ts=T0, period_ms=1, source="east", target="north", topic="east.t", upstream_topic="t", partition=0,
        record_count=1, byte_count=1))[1]
    table = flat_table(kafka_rows([partition_record(T0, 0, 1)],
                                  [b"not json", b'{"v": 9}', b"{}", incomplete, elsewhere]), target="west")
    assert table["kind"].to_pylist() == ["partition"] + ["invalid"] * 5
    rows = wp.window_partials(table).to_pylist()
    (invalid,) = [r for r in rows if r["kind"] == "invalid"]
    assert (invalid["target"], invalid["source"], invalid["topic"], invalid["partition"]) == ("west", "east",
                                                                                              ALL_TOPICS, 0)
    assert stats(invalid, INVALID_RECORDS_METRIC)[:5] == (5, 5, 1, 5, 5)
    assert '"target":"north"' in wp.invalid_excerpts(table)[("west", "east", 0, T0)]  # the last one
    assert all(r[f"{INVALID_RECORDS_METRIC}__n"] is None for r in rows if r["kind"] != "invalid")


def test_a_record_from_far_in_the_future_is_invalid():
    # The clock reads T0: a report claiming T0 + 1 day would drag the watermark a day ahead.
    rows = partials([partition_record(T0 + MAX_FUTURE_SKEW_MS, 0, 1),
                            partition_record(T0 + 86_400_000, 0, 2)])
    assert sorted((r["kind"], r["level"]) for r in rows) == [("invalid", "p"), ("partition", "p"),
                                                              ("partition", "r"), ("partition", "t")]


def test_event_time_is_judged_by_the_aggregators_clock_not_the_producers():
    # A producer whose clock jumped two hours stamps both ts and CreateTime: still too far ahead.
    ahead = T0 + 2 * 3_600_000
    rows = kafka_rows([partition_record(ahead, 0, 1), partition_record(T0, 0, 2)], kafka_ts=ahead)
    table = flat_table(rows, now_ms=T0)
    assert table["kind"].to_pylist() == ["invalid", "partition"]


def latency(**parts: float) -> bytes:
    summary = {"min": 1.0, "max": 1.0, "avg": 1.0, "last": 1.0, "count": 1} | parts
    body = json.loads(raw_metrics.encode(partition_record(T0, 0, 1))[1])
    return json.dumps(body | {"replication_latency_ms": summary}).encode()


def with_fields(**fields: object) -> bytes:
    return json.dumps(json.loads(raw_metrics.encode(partition_record(T0, 0, 1))[1]) | fields).encode()


@pytest.mark.parametrize("value", [
    latency(avg=float("nan")), latency(max=float("inf")), latency(min=float("-inf")),  # json writes NaN
    latency(count=-1),
    with_fields(topic="*"), with_fields(topic="t" * 250), with_fields(topic="../x"), with_fields(topic=".."),
    with_fields(upstream_topic="a b"), with_fields(source="we st"), with_fields(record_count=-3),
    with_fields(byte_count=-1), with_fields(period_ms=0), with_fields(period_ms=2 * 86_400_000),
    with_fields(ts=-1), b"[" * 3000, b'{"v":1,' * 2000, b"{" + b" " * 20_000 + b"}",
])
def test_values_that_are_not_valid_raw_metrics_are_invalid(value: bytes):
    table = flat_table(kafka_rows([partition_record(T0, 0, 1)], [value]), now_ms=T0)
    assert table["kind"].to_pylist() == ["partition", "invalid"]
    assert table["excerpt"][1].as_py() == value.decode("utf-8", "replace")[:200]


def test_groups_named_star_are_invalid():
    group = GroupMetrics(ts=T0, period_ms=5000, source="east", target="west", group="*", topic="east.orders",
                         upstream_topic="orders", partition=0, group_lag=1)
    table = flat_table(kafka_rows([group]), now_ms=T0)
    assert table["kind"].to_pylist() == ["invalid"]


def test_windows_that_ended_by_the_watermark_are_dropped_invalid_records_never():
    records = [partition_record(T0 + 9_999, 0, 1), partition_record(T0 + 10_000, 0, 2)]
    rows = partials(records, [b"junk"], watermark_ms=T0 + 10_000)
    assert {(r["kind"], r["window_start"]) for r in rows if r["level"] == "p"} == {
        ("partition", T0 + 10_000), ("invalid", T0)}


def test_records_dropped_as_late_are_counted_per_source():
    records = [partition_record(T0 + 9_999, 0, 1), partition_record(T0 + 5_000, 1, 1),
               partition_record(T0 + 10_000, 0, 2)]
    table = flat_table(kafka_rows(records, [b"junk"]), target="west")
    assert late_counts(table, T0 + 10_000) == {("west", "east"): 2}  # the invalid record is not late
    assert late_counts(table, T0 + 9_999) == {} and late_counts(table, None) == {}


def test_bad_values_among_many_are_invalid_alone_and_keep_their_offsets():
    good = [partition_record(T0 + i, i % 3, 1) for i in range(997)]
    table = flat_table(kafka_rows(good, [b"{}{}", b'{"v": 1, "ts": "soon"}', b"\xff\xfe"]), target="west")
    invalid = table.filter(pa.compute.equal(table["kind"], "invalid"))
    assert invalid["offset"].to_pylist() == [997, 998, 999]
    assert invalid["excerpt"].to_pylist() == ["{}{}", '{"v": 1, "ts": "soon"}', "\ufffd\ufffd"]
    valid = table.filter(pa.compute.equal(table["kind"], "partition"))
    assert valid["ts"].to_pylist() == [T0 + i for i in range(997)]


def test_pretty_printed_records_parse_and_empty_or_null_values_do_not():
    pretty = json.dumps(json.loads(raw_metrics.encode(partition_record(T0, 2, 7))[1]), indent=2).encode()
    table = flat_table(kafka_rows([], [pretty, b"", None, b"  "]), target="west")
    assert table["kind"].to_pylist() == ["partition", "invalid", "invalid", "invalid"]
    assert table["record_count"].to_pylist() == [7, None, None, None]
    assert table["excerpt"].to_pylist()[1:] == ["", "<null value>", "  "]


def test_unknown_fields_are_ignored_and_the_source_of_an_invalid_record_is_its_topic():
    body = json.loads(raw_metrics.encode(partition_record(T0, 0, 3))[1]) | {"future_field": {"x": [1]}}
    table = flat_table(kafka_rows([], [json.dumps(body).encode(), b"[1, 2]"]))
    assert table.select(["kind", "source", "record_count"]).to_pylist() == [
        {"kind": "partition", "source": "east", "record_count": 3},
        {"kind": "invalid", "source": "east", "record_count": None}]


def test_a_batch_of_garbage_or_mistyped_records_is_all_invalid():
    garbage = [b"junk"] * 2000 + [b"{broken"] + [b'{"v": 1, "ts": "x"}'] * 2000 + [b'{"v": 1.0}'] * 999 + [
        b'{"v": 1, "record_age_ms": {"min": "low"}}']
    table = flat_table(kafka_rows([partition_record(T0, 0, 1)], garbage), target="west")
    assert table["kind"].value_counts().to_pylist() == [{"values": "partition", "counts": 1},
                                                         {"values": "invalid", "counts": 5001}]


def test_the_drivers_reader_health_is_kept_as_the_replications_latest_value():
    readers = {"progress": raw_metrics.ReaderHealth(3, True, "mm2-offsets.east.internal[4]@7: bad"),
               "offset_syncs": raw_metrics.ReaderHealth(0, False)}
    older = ReplicationMetrics(ts=T0 - 2000, period_ms=1000, source="east", target="west", status="RUNNING",
                               readers={"progress": raw_metrics.ReaderHealth(1, True)})
    newest = ReplicationMetrics(ts=T0 - 1000, period_ms=1000, source="east", target="west", status="RUNNING",
                                readers=readers)
    [latest] = wp.latest_records(flat([older, newest]))
    assert replication_latest(latest, [])["readers"] == {
        "progress": {"rejected": 3, "alive": True, "last_rejection": "mm2-offsets.east.internal[4]@7: bad"},
        "offset_syncs": {"rejected": 0, "alive": False, "last_rejection": None}}
    # A report of an older driver (no readers) keeps its place as the latest value, without readers.
    [plain] = wp.latest_records(flat([ReplicationMetrics(ts=T0 - 1000, period_ms=1000, source="east",
                                                         target="west", status="RUNNING")]))
    assert replication_latest(plain, [])["readers"] is None


@pytest.mark.parametrize("readers", [
    b'{"progress":{"rejected":-1,"alive":true}}',  # a total is never negative
    b'{"progress":{"alive":true}}',  # a reader without its count
    b'{"control":{"rejected":"many","alive":true}}',
])
def test_a_report_with_broken_readers_is_invalid(readers):
    value = (b'{"v":1,"kind":"replication","ts":%d,"period_ms":1000,"source":"east","target":"west",'
             b'"status":"RUNNING","readers":%s}' % (T0 - 1000, readers))
    ok = ReplicationMetrics(ts=T0 - 1000, period_ms=1000, source="east", target="west", status="RUNNING")
    table = flat([ok], [value])
    assert table["kind"].to_pylist() == ["replication", "invalid"]
