"""Which history each latest value of a batch reads, and where the value is kept (pure, no Redis)."""

from __future__ import annotations

from aggregator import latest_values, partition_verdicts
from aggregator.latest_value_reads import (
    earliest_starts,
    history_reads,
    latest_value,
    offset_reads,
    uncovered,
)
from contract import redis_layout as layout

TS = 1_700_000_000_000
PARTITION = ("partition", "west", "east", "orders", "3", "")
GROUP = ("group", "west", "east", "orders", "3", "billing")


def test_a_partition_reads_its_end_offsets_and_its_verdict_the_offsets_it_looks_back_over():
    record = {"ts": TS, "period_ms": 30_000}
    [end_offsets] = history_reads({PARTITION: record}, {})
    assert (end_offsets.kind, end_offsets.series.metric) == ("partition", "source_end_offset")
    assert (end_offsets.low_ms, end_offsets.high_ms) == (TS - latest_values.HISTORY_SPAN_MS, TS)
    offsets = offset_reads([(PARTITION, record)])
    assert [r.series for r in offsets] == list(partition_verdicts.offset_series(PARTITION))
    assert {(r.kind, r.low_ms, r.high_ms) for r in offsets} == {
        ("offsets", TS - partition_verdicts.lookback_of(record), TS)}


def test_a_group_reads_its_topics_end_offsets_only():
    [read] = history_reads({GROUP: {"ts": TS}}, {})
    assert read.kind == "group"
    assert read.series == layout.SeriesId("west", "east", "orders", 3, "source_end_offset")


def test_a_replication_reads_the_record_counts_of_its_recent_periods():
    [read] = history_reads({}, {("west", "east"): {"ts": TS, "period_ms": 5_000}})
    assert read.subject == ("replication", "west", "east")
    assert read.series == layout.SeriesId("west", "east", layout.ALL_TOPICS, layout.WHOLE_TOPIC,
                                          "record_count")
    assert read.high_ms - read.low_ms == latest_values.recent_span_ms(5_000) - 1


def test_each_kind_is_kept_in_its_own_hash_and_field():
    assert latest_value("partition", PARTITION, {"ts": TS}, [])[:2] == (
        layout.partition_latest_key("west", "east", "orders"), "3")
    assert latest_value("group", GROUP, {"ts": TS}, [])[:2] == (
        layout.group_latest_key("west", "east", "billing"), layout.group_latest_field("orders", 3))
    assert latest_value("replication", ("replication", "west", "east"), {"ts": TS}, [])[:2] == (
        layout.replication_status_key("west", "east"), "replication")


def test_earliest_starts_are_per_metric():
    reads = history_reads({PARTITION: {"ts": TS, "period_ms": 30_000},
                           GROUP: {"ts": TS - 5_000}}, {})
    reads += offset_reads([(PARTITION, {"ts": TS, "period_ms": 30_000})])
    starts = earliest_starts(reads)
    assert starts["source_end_offset"] == TS - 5_000 - latest_values.HISTORY_SPAN_MS
    assert starts["upstream_offset"] == TS - partition_verdicts.lookback_of({"period_ms": 30_000})


def test_uncovered_names_each_series_once_with_its_lowest_start_and_widest_span():
    later = ("partition", "west", "east", "orders", "3", "")
    reads = history_reads({PARTITION: {"ts": TS}, GROUP: {"ts": TS + 60_000}}, {})
    reads += history_reads({later: {"ts": TS + 1_000}}, {})
    reads += offset_reads([(PARTITION, {"ts": TS})])
    end_offsets = reads[0].series
    wanted = uncovered(reads, lambda series, low: series.metric != "source_end_offset")
    assert set(wanted) == {end_offsets}
    assert wanted[end_offsets] == (TS - latest_values.HISTORY_SPAN_MS, latest_values.HISTORY_SPAN_MS)
    assert uncovered(reads, lambda series, low: True) == {}
