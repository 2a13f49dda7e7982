"""The raw-metrics record: codec round trips, clear errors, and agreement with its JSON Schema."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from contract.records import raw_metrics
from contract.records.raw_metrics import (
    GroupMetrics,
    LatencySummary,
    PartitionMetrics,
    RawMetricsError,
    ReaderHealth,
    ReplicationMetrics,
)

PARTITION = PartitionMetrics(
    ts=1_700_000_000_000, period_ms=5000, source="east", target="west", topic="east.orders",
    upstream_topic="orders", partition=2, record_count=10, byte_count=1234,
    replication_latency_ms=LatencySummary(1.0, 9.0, 4.0, 3.0, 10), records_lag=7,
    source_end_offset=107, upstream_offset=99, target_offset=99)
GROUP = GroupMetrics(ts=1_700_000_000_000, period_ms=5000, source="east", target="west", group="billing",
                     topic="east.orders", upstream_topic="orders", partition=0,
                     checkpoint_latency_ms=LatencySummary(5, 5, 5, 5, 1), group_lag=3)
REPLICATION = ReplicationMetrics(ts=1_700_000_000_000, period_ms=5000, source="east", target="west",
                                 status="FAILED", error="boom", topics_replicated=3)

WITH_READERS = ReplicationMetrics(
    ts=1_700_000_000_000, period_ms=5000, source="east", target="west", status="RUNNING",
    readers={"progress": ReaderHealth(3, True, "mm2-offsets.east.internal[4]@7: ValueError: x"),
             "control": ReaderHealth(0, False)})


@pytest.mark.parametrize("record", [PARTITION, GROUP, REPLICATION, WITH_READERS])
def test_round_trip_and_schema(record):
    key, value = raw_metrics.encode(record)
    assert raw_metrics.decode(value) == record
    assert key.decode() == record.key()
    jsonschema.validate(json.loads(value), raw_metrics.json_schema())


def test_a_group_report_carries_its_topic_partitions_key_and_a_subject_one_key():
    """Placement by key: a partition's reports and its groups' share the key (one Kafka partition, the
    task that reads them holds the partition's end offsets), every report of a subject has one key (kept
    in order), and every other topic partition or replication has its own."""
    key = raw_metrics.encode(PARTITION)[0]
    assert key == b"partition|east|west|east.orders|2"
    later = replace(PARTITION, ts=PARTITION.ts + 5000, record_count=0, records_lag=None)
    groups = [replace(GROUP, partition=2), replace(GROUP, partition=2, group="odd|group", ts=GROUP.ts + 1,
                                                       group_lag=None)]
    assert {raw_metrics.encode(r)[0] for r in [later, *groups]} == {key}
    others = [replace(GROUP, partition=1), replace(PARTITION, topic="east.other"),
              replace(PARTITION, source="north"), replace(PARTITION, target="south"), REPLICATION]
    keys = [raw_metrics.encode(r)[0] for r in others]
    assert len({key, *keys}) == 1 + len(others)
    assert keys[-1] == b"replication|east|west"
    assert raw_metrics.placement_key("east", "west", "east.orders", 2) == key.decode()


def test_absent_optional_fields_are_not_written():
    _, value = raw_metrics.encode(PartitionMetrics(1, 1, "a", "b", "a.t", "t", 0, 0, 0))
    body = json.loads(value)
    assert "records_lag" not in body and "replication_latency_ms" not in body
    assert body["v"] == raw_metrics.VERSION and body["kind"] == "partition"


@pytest.mark.parametrize("value, message", [
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"v": 2, "kind": "partition"}', "unsupported version 2"),
    (b'{"v": 1, "kind": "weird"}', "unknown kind 'weird'"),
    (b'{"v": 1, "kind": "partition", "ts": 1}', "partition record"),
    (b'{"v": 1, "kind": "group", "ts": 1, "period_ms": 1, "source": "a", "target": "b", "group": "g",'
     b' "topic": "t", "upstream_topic": "t", "partition": 0, "checkpoint_latency_ms": {"min": 1}}',
     "checkpoint_latency_ms"),
    (b"[" * 3000, "not JSON"),  # json.loads raised RecursionError here
    (b'{"v": 1, "kind": "partition", "ts": 1, "replication_latency_ms": {"avg": NaN}}', "not JSON"),
    (b'{"v": 1, "kind": "partition", "ts": 1, "replication_latency_ms": {"avg": 1e400}}', "not JSON"),
    (b'{"v": 1, "kind": "partition", "ts": 1, "topic": "*"}', "topic '\\*' is not a legal Kafka topic"),
    (b'{"v": 1, "kind": "partition", "ts": 1, "topic": "' + b"t" * 250 + b'"}', "not a legal Kafka topic"),
    (b'{"v": 1, "kind": "partition", "ts": 1, "record_count": -5}', "record_count -5 is not between"),
    (b'{"v": 1, "kind": "partition", "ts": 1, "partition": 2147483648}', "partition 2147483648"),
    (b'{"v": 1, "kind": "group", "ts": 1, "group": "*"}', "not a legal group id"),
    (b'{"v": 1, "kind": "replication", "ts": 1, "status": 5}', "status must be a string"),
])
def test_bad_records_raise_a_clear_error(value, message):
    with pytest.raises(RawMetricsError, match=message):
        raw_metrics.decode(value)


def test_a_report_of_an_older_driver_has_no_readers_and_unknown_reader_kinds_are_ignored():
    old = b'{"v":1,"kind":"replication","ts":1,"period_ms":1,"source":"a","target":"b","status":"RUNNING"}'
    assert raw_metrics.decode(old).readers is None
    newer = old[:-1] + (b',"readers":{"lineage":{"rejected":1,"alive":true},'
                        b'"control":{"rejected":2,"alive":true}}}')
    assert raw_metrics.decode(newer).readers == {"control": ReaderHealth(2, True)}


_REPORT = b'{"v":1,"kind":"replication","ts":1,"period_ms":1,"source":"a","target":"b","status":"RUNNING",'


@pytest.mark.parametrize("readers, message", [
    (b'[1]', "readers must be an object"),
    (b'{"progress": 5}', "readers.progress must be an object"),
    (b'{"progress": {"alive": true}}', "readers.progress.rejected is missing"),
    (b'{"progress": {"rejected": -1, "alive": true}}', "readers.progress.rejected -1 is not between"),
    (b'{"control": {"rejected": 1, "alive": "yes"}}', "readers.control.alive must be a boolean"),
    (b'{"control": {"rejected": 1.5, "alive": true}}', "readers.control.rejected must be an integer"),
])
def test_bad_readers_raise_a_clear_error(readers, message):
    value = _REPORT + b'"readers":' + readers + b"}"
    with pytest.raises(RawMetricsError, match=message):
        raw_metrics.decode(value)


def test_every_metric_is_a_field_of_its_subject_with_a_type():
    fields = {"partition": PartitionMetrics, "group": GroupMetrics}
    for name, spec in raw_metrics.METRICS.items():
        assert name in fields[spec.subject].__dataclass_fields__
        expected = "summary" if spec.kind is raw_metrics.MetricKind.LATENCY else "long"
        assert raw_metrics.FIELD_TYPES[name] == expected
        assert name in raw_metrics.json_schema()["properties"]


def test_every_field_of_every_kind_has_a_type():
    for cls in (PartitionMetrics, GroupMetrics, ReplicationMetrics):
        assert set(cls.__dataclass_fields__) <= set(raw_metrics.FIELD_TYPES), cls.__name__


def test_latency_summary_of_samples():
    assert LatencySummary.of([]) is None
    assert LatencySummary.of([3.0, 1.0, 2.0]) == LatencySummary(1.0, 3.0, 2.0, 2.0, 3)
