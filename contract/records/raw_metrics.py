"""The raw-metrics record: what the driver publishes to `srm-metrics.<source>.internal` on the target.

This module alone owns the format: encode and decode here, the JSON Schema beside it
(`raw_metrics.schema.json`), and the field types the aggregator's Arrow reader parses with
(`FIELD_TYPES`). One JSON object per record, `"v": 1`.

The Kafka key says where a record goes, not who it is about: a topic partition's reports and the
reports of its consumer groups all carry the partition report's key (`placement_key`:
`partition|<source>|<target>|<remote topic>|<partition>`), a replication's report
`replication|<source>|<target>`. A partitioner places by key (the driver's producers: murmur2, Java's
default), so a partition's reports and its groups' land in one Kafka partition of the topic, and the
one task that reads them holds the partition's end offsets a group's lag in seconds is read from. A
subject's records all carry one key, so they stay in order. Several subjects share a key, so a reader
takes a subject's identity from the value (an older driver keyed a group's reports by the group,
`group|<source>|<target>|<group>|<topic>|<partition>`: they read the same, from another Kafka
partition), and the topic is never compacted (compaction would keep one subject's report a key).

Three kinds of subject share one flat shape (unused fields absent):
- `partition`: one remote topic-partition of a replication (MM2 MirrorSourceConnector metrics + lag);
- `group`: one consumer group's topic-partition checkpoint (MM2 MirrorCheckpointConnector metrics);
- `replication`: the replication as a whole (status, workers, tasks, heartbeats, and the health of the
  driver's readers of its internal topics: records refused, whether each reads).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from contract.kafka_names import check_alias, check_group, check_topic
from contract.untrusted import Rejected, finite, long, parse_json

VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("raw_metrics.schema.json")
# Settings of `srm-metrics.<source>.internal`, whichever driver task creates it first: monitoring data
# the aggregator reads within seconds, so a day of retention covers any aggregator outage worth replaying.
TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": str(24 * 3_600_000)}


# Cap of a record value a reader takes from the topic: a real one is under 1 KiB.
MAX_VALUE_BYTES = 16384
# Every number of a record lies within +-MAX_NUMBER (2^53 - 1, float64's last exact integer): the
# aggregator keeps windows in float64, where a larger integer is no longer itself (2^53 + 1 reads as
# 2^53), and a latency summary's sum (avg x count) stays below 2^106, finite however many records a
# window adds up. No real counter, offset or latency comes near it (2^53 ms is 285,000 years).
MAX_NUMBER = 2**53 - 1


class RawMetricsError(ValueError):
    """A raw-metrics record that does not parse; the message says what is wrong."""


class MetricKind(Enum):
    """How a metric rolls up over time: this decides the `value` the API reports for a range."""

    COUNTER = "counter"  # delta per period: value over a range is the sum
    GAUGE = "gauge"  # a level: value over a range is the last
    LATENCY = "latency"  # per-record summary: value over a range is the record-weighted average


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: MetricKind
    subject: str  # which record kind carries it


METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec("record_count", MetricKind.COUNTER, "partition"),
        MetricSpec("byte_count", MetricKind.COUNTER, "partition"),
        MetricSpec("replication_latency_ms", MetricKind.LATENCY, "partition"),
        MetricSpec("record_age_ms", MetricKind.LATENCY, "partition"),
        MetricSpec("records_lag", MetricKind.GAUGE, "partition"),
        MetricSpec("source_end_offset", MetricKind.GAUGE, "partition"),
        MetricSpec("upstream_offset", MetricKind.GAUGE, "partition"),
        MetricSpec("target_offset", MetricKind.GAUGE, "partition"),
        MetricSpec("checkpoint_latency_ms", MetricKind.LATENCY, "group"),
        MetricSpec("group_upstream_offset", MetricKind.GAUGE, "group"),
        MetricSpec("group_downstream_offset", MetricKind.GAUGE, "group"),
        MetricSpec("group_lag", MetricKind.GAUGE, "group"),
    )
}

DERIVED_METRICS: dict[str, MetricSpec] = {
    spec.name: spec
    for spec in (
        MetricSpec("lag_seconds", MetricKind.GAUGE, "partition"),
        MetricSpec("group_lag_seconds", MetricKind.GAUGE, "group"),
    )
}
"""Metrics the aggregator derives, never read from a raw record: lag in seconds, interpolated from the
end-offset history (aggregator/lag_seconds.py) for each partition and group report. Rolled up like
the gauges above: a topic's or replication's value is its worst partition's at the newest report."""

SERVED_METRICS: dict[str, MetricSpec] = {**METRICS, **DERIVED_METRICS}
"""Every metric with windows in Redis, as the service serves them."""


@dataclass(frozen=True)
class LatencySummary:
    """min/max/avg/last of a per-record latency over one metrics period (count = records measured)."""

    min: float
    max: float
    avg: float
    last: float
    count: int

    @classmethod
    def of(cls, samples: list[float]) -> LatencySummary | None:
        if not samples:
            return None
        return cls(min(samples), max(samples), sum(samples) / len(samples), samples[-1], len(samples))


def placement_key(source: str, target: str, topic: str, partition: int) -> str:
    """The Kafka key of the reports about one remote topic partition: its own and its groups'."""
    return f"partition|{source}|{target}|{topic}|{partition}"


@dataclass(frozen=True)
class PartitionMetrics:
    ts: int
    period_ms: int
    source: str
    target: str
    topic: str  # remote (downstream) topic
    upstream_topic: str
    partition: int
    record_count: int
    byte_count: int
    replication_latency_ms: LatencySummary | None = None
    record_age_ms: LatencySummary | None = None
    records_lag: int | None = None
    source_end_offset: int | None = None
    upstream_offset: int | None = None
    target_offset: int | None = None
    kind: str = field(default="partition", init=False)

    def key(self) -> str:
        return placement_key(self.source, self.target, self.topic, self.partition)


@dataclass(frozen=True)
class GroupMetrics:
    ts: int
    period_ms: int
    source: str
    target: str
    group: str
    topic: str  # remote (downstream) topic
    upstream_topic: str
    partition: int
    checkpoint_latency_ms: LatencySummary | None = None
    group_upstream_offset: int | None = None
    group_downstream_offset: int | None = None
    group_lag: int | None = None
    kind: str = field(default="group", init=False)

    def key(self) -> str:
        """Its topic partition's report's key: a group's reports travel beside their partition's."""
        return placement_key(self.source, self.target, self.topic, self.partition)


# The driver's readers of records from topics anyone with Produce rights may write (the kinds a
# replication report's `readers` names). Unknown kinds in a record are ignored: a newer driver may
# read more.
READER_KINDS = ("progress", "control", "offset_syncs", "checkpoints")


@dataclass(frozen=True)
class ReaderHealth:
    """One reader's word in a replication report: records it refused since the driver started (too
    large, undecodable, out of range; clients.record_guard.RecordGuard), whether it reads now, and the
    last refusal (topic[partition]@offset and why, escaped)."""

    rejected: int
    alive: bool
    last_rejection: str | None = None


@dataclass(frozen=True)
class ReplicationMetrics:
    ts: int
    period_ms: int
    source: str
    target: str
    status: str
    error: str | None = None
    workers: int = 0
    tasks: int = 0
    last_heartbeat_ts: int | None = None
    topics_replicated: int = 0
    enabled: bool = True
    readers: dict[str, ReaderHealth] | None = None  # reader kind (READER_KINDS) -> its health
    kind: str = field(default="replication", init=False)

    def key(self) -> str:
        return f"replication|{self.source}|{self.target}"


RawMetrics = PartitionMetrics | GroupMetrics | ReplicationMetrics
_BY_KIND: dict[str, type] = {
    "partition": PartitionMetrics,
    "group": GroupMetrics,
    "replication": ReplicationMetrics,
}
_SUMMARY_FIELDS = ("replication_latency_ms", "record_age_ms", "checkpoint_latency_ms")


def encode(record: RawMetrics) -> tuple[bytes, bytes]:
    """Kafka key and value bytes for one record."""
    body: dict[str, Any] = {"v": VERSION}
    body.update({k: v for k, v in asdict(record).items() if v is not None})
    if "readers" in body:
        body["readers"] = {kind: {k: v for k, v in health.items() if v is not None}
                           for kind, health in body["readers"].items()}
    return record.key().encode(), json.dumps(body, separators=(",", ":")).encode()


def decode(value: bytes | str) -> RawMetrics:
    """Parse one record value; raises RawMetricsError naming what is wrong."""
    try:
        body = parse_json(value, "raw metrics value")
    except Rejected as exc:
        raise RawMetricsError(str(exc)) from None
    if not isinstance(body, dict):
        raise RawMetricsError("not a JSON object")
    if body.get("v") != VERSION:
        raise RawMetricsError(f"unsupported version {body.get('v')!r} (expected {VERSION})")
    kind = body.pop("kind", None)
    cls = _BY_KIND.get(kind)
    if cls is None:
        raise RawMetricsError(f"unknown kind {kind!r}")
    body.pop("v")
    try:
        _check_fields(body)
    except Rejected as exc:
        raise RawMetricsError(f"{kind} record: {exc}") from None
    for name in _SUMMARY_FIELDS:
        if isinstance(body.get(name), dict):
            try:
                body[name] = LatencySummary(**body[name])
            except TypeError as exc:
                raise RawMetricsError(f"{name}: {exc}") from None
    if isinstance(body.get("readers"), dict):
        body["readers"] = {kind: ReaderHealth(**{f: health.get(f) for f in READER_FIELD_TYPES})
                           for kind, health in body["readers"].items() if kind in READER_KINDS}
    try:
        return cls(**body)
    except TypeError as exc:
        raise RawMetricsError(f"{kind} record: {exc}") from None


_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-MAX_NUMBER, MAX_NUMBER)}
_NON_NEGATIVE = {"record_count", "byte_count", "count", "partition", "period_ms", "workers", "tasks",
                 "topics_replicated", "rejected"}


def _check_readers(value: object) -> None:
    if not isinstance(value, dict):
        raise Rejected("readers must be an object")
    for kind in READER_KINDS:
        health = value.get(kind)
        if health is None:
            continue
        if not isinstance(health, dict):
            raise Rejected(f"readers.{kind} must be an object")
        for name in ("rejected", "alive"):
            if health.get(name) is None:
                raise Rejected(f"readers.{kind}.{name} is missing")
        try:
            _check_fields(health, READER_FIELD_TYPES)
        except Rejected as exc:
            raise Rejected(f"readers.{kind}.{exc}") from None


def _check_fields(body: dict[str, Any], types: dict[str, str] | None = None) -> None:
    """Rejected unless every known field present has its type, numbers are finite and within MAX_NUMBER, and
    names are legal Kafka names (``*`` is the replication-wide series, never a topic)."""
    for name, kind in (types or FIELD_TYPES).items():
        value = body.get(name)
        if value is None:
            continue
        if kind == "summary":
            if not isinstance(value, dict):
                raise Rejected(f"{name} must be an object")
            _check_fields(value, SUMMARY_FIELD_TYPES)
        elif kind == "readers":
            _check_readers(value)
        elif kind in _INT_RANGES:
            low = 0 if name in _NON_NEGATIVE else _INT_RANGES[kind][0]
            long(value, name, low, _INT_RANGES[kind][1])
        elif kind == "double":
            finite(value, name, -MAX_NUMBER, MAX_NUMBER)
        elif not isinstance(value, {"boolean": bool, "string": str}[kind]):
            raise Rejected(f"{name} must be a {kind}")
    for name in ("topic", "upstream_topic"):
        if name in body and body[name] is not None:
            check_topic(body[name], name)
    for name in ("source", "target"):
        if name in body:
            check_alias(body[name], name)
    if body.get("group") is not None:
        check_group(body["group"])


def json_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


# Type of every field of every kind, for readers that parse many records at once with a fixed schema
# (the aggregator's Arrow JSON reader): absent fields read as null. "summary" is a LatencySummary object.
SUMMARY_FIELD_TYPES = {"min": "double", "max": "double", "avg": "double", "last": "double", "count": "long"}
# "readers" is an object of READER_KINDS, each a ReaderHealth object of these fields.
READER_FIELD_TYPES = {"rejected": "long", "alive": "boolean", "last_rejection": "string"}
FIELD_TYPES: dict[str, str] = {
    "v": "int",
    "kind": "string",
    "ts": "long",
    "period_ms": "long",
    "source": "string",
    "target": "string",
    "topic": "string",
    "upstream_topic": "string",
    "partition": "int",
    "group": "string",
    "record_count": "long",
    "byte_count": "long",
    "replication_latency_ms": "summary",
    "record_age_ms": "summary",
    "records_lag": "long",
    "source_end_offset": "long",
    "upstream_offset": "long",
    "target_offset": "long",
    "checkpoint_latency_ms": "summary",
    "group_upstream_offset": "long",
    "group_downstream_offset": "long",
    "group_lag": "long",
    "status": "string",
    "error": "string",
    "workers": "int",
    "tasks": "int",
    "last_heartbeat_ts": "long",
    "topics_replicated": "int",
    "enabled": "boolean",
    "readers": "readers",
}
# The fields a record of each kind may carry (with `v`): a reader that parses a kind at a time needs
# only these; any other field in such a record is unexpected there, and ignored like an unknown one.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    kind: ("v", *(f.name for f in fields(cls))) for kind, cls in _BY_KIND.items()}
