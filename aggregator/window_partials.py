"""One micro-batch's flat rows (rollups.flat_rows, as Arrow) -> partial 10 s windows and latest records.

Vectorized on Arrow (C++ hash aggregation): per-record Python work would cost more than the batch, and
Spark's sort-based aggregation over a hundred aggregates took seconds for 25k records.

Each record is kept at several levels, with n/sum/min/max/last per metric: a counter or gauge value is
one sample of itself, a latency summary is `count` samples with `sum = avg * count`.
- level `p`: the record's own subject (a remote topic-partition, a group's topic-partition, the
  replication as a whole, or for an invalid record its raw-metrics topic partition);
- level `t`: the whole remote topic (partition WHOLE_TOPIC) of partition and group records;
- level `r`: the whole replication (topic ALL_TOPICS), counters of partition records only.
`last` is the value with the greatest (ts, value): whole-topic rows share a report's ts across
partitions, so ties break by value and no batch split can change the result. The sink merges with the
same rule (redis_layout.merge_windows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aggregator.redis_layout import (
    ALL_TOPICS,
    FINEST_WINDOW,
    INVALID_RECORDS_METRIC,
    REPLICATION_LEVEL_METRICS,
    WHOLE_TOPIC,
)
from aggregator.rollups import INVALID_KIND, REPLICATION_FIELDS
from driver.wire.raw_metrics import METRICS, MetricKind

ALL_METRICS = (*METRICS, INVALID_RECORDS_METRIC)
STATS = ("n", "sum", "min", "max", "last")
KEY_COLUMNS = ["kind", "level", "target", "source", "group", "topic", "partition"]
SUBJECT_COLUMNS = ["kind", "target", "source", "topic", "partition", "group"]
# Columns of a latest record besides its subject (None values are left out, as in the raw JSON).
LATEST_FIELDS = ("ts", "period_ms", "upstream_topic", *[n for n, s in METRICS.items()
                                                         if s.kind is not MetricKind.LATENCY],
                 *REPLICATION_FIELDS)
_NULL = pa.scalar(None, pa.float64())


@dataclass
class BatchPartials:
    windows: pa.Table  # one row per (level, subject, 10 s window); see window_partials
    latest: list[dict[str, Any]]  # newest record per subject (valid records only)
    # invalid-records window (target, source, Kafka partition, window start) -> its last record's excerpt
    excerpts: dict[tuple[str, str, int, int], str]


def of_windows(rows: Iterable[Mapping[str, Any] | Any]) -> BatchPartials:
    """Finest windows given one metric a row (target, source, topic, upstream_topic, group, partition,
    metric, window_start, count, sum, min, max, last; dicts or pyspark Rows), as a batch's partials:
    how tests and tools seed Redis through the sink. `last` counts as of its window start."""
    wide = []
    for row in rows:
        r = row.asDict() if hasattr(row, "asDict") else dict(row)
        topic, partition, metric = r["topic"], int(r["partition"]), r["metric"]
        level = "r" if topic == ALL_TOPICS else "t" if partition == WHOLE_TOPIC else "p"
        start = int(r["window_start"])
        wide.append({
            "kind": "group" if r.get("group") else "partition", "level": level, "target": r["target"],
            "source": r["source"], "group": r.get("group") or "", "topic": topic, "partition": partition,
            "window_start": start, "max_ts": start, "upstream_topic": r.get("upstream_topic"),
            f"{metric}__n": r["count"], f"{metric}__sum": r["sum"], f"{metric}__min": r["min"],
            f"{metric}__max": r["max"], f"{metric}__last": r["last"], f"{metric}__last_ts": start})
    return BatchPartials(pa.Table.from_pylist(wide, schema=partials_schema()), [], {})


def partials(flat: pa.Table) -> BatchPartials:
    return BatchPartials(window_partials(flat), latest_records(flat), invalid_excerpts(flat))


def _samples(flat: pa.Table) -> dict[str, pa.Array]:
    """n/sum/min/max/last columns of every metric, one row per flat row."""
    out: dict[str, Any] = {}
    for name, spec in METRICS.items():
        if spec.kind is MetricKind.LATENCY:
            count = pc.cast(flat[f"{name}__count"], pa.float64())
            parts = [count, pc.multiply(flat[f"{name}__avg"], count), flat[f"{name}__min"],
                     flat[f"{name}__max"], flat[f"{name}__last"]]
        else:
            value = pc.cast(flat[name], pa.float64())
            parts = [pc.if_else(pc.is_valid(value), 1.0, _NULL), value, value, value, value]
        out |= {f"{name}__{s}": pc.cast(p, pa.float64()) for s, p in zip(STATS, parts, strict=True)}
    invalid = pc.equal(flat["kind"], INVALID_KIND)
    offset = pc.cast(flat["offset"], pa.float64())
    one = pc.if_else(invalid, 1.0, _NULL)
    out |= {f"{INVALID_RECORDS_METRIC}__{s}": p for s, p in zip(STATS, [one, one] + [pc.if_else(
        invalid, offset, _NULL)] * 3, strict=True)}
    return out


def _levels(flat: pa.Table) -> pa.Table:
    ts = flat["ts"]
    base = {c: flat[c] for c in ("kind", "target", "source", "group", "topic", "partition", "upstream_topic")}
    base |= {"ts": ts, "window_start": pc.subtract(ts, _mod(ts, FINEST_WINDOW.size_ms))}
    base |= _samples(flat)
    own = pa.table(base | {"level": pa.array(["p"] * flat.num_rows, pa.string())})
    topic = _relabel(own.filter(pc.is_in(flat["kind"], pa.array(["partition", "group"]))),
                     level="t", partition=WHOLE_TOPIC)
    whole = topic.filter(pc.equal(topic["kind"], "partition"))
    # Gauges and latencies do not add up across topics: the replication level keeps counters only.
    dropped = {f"{m}__{s}": None for m in ALL_METRICS if m not in REPLICATION_LEVEL_METRICS for s in STATS}
    whole = _relabel(whole, level="r", topic=ALL_TOPICS, upstream_topic=None, **dropped)
    return pa.concat_tables([own, topic, whole])


def _relabel(table: pa.Table, **values: Any) -> pa.Table:
    """`table` with the named columns set to one value (same types)."""
    for name, value in values.items():
        i = table.schema.get_field_index(name)
        column_type = table.schema.field(i).type
        table = table.set_column(i, name, pa.array([value] * table.num_rows, column_type))
    return table


def _mod(ts: pa.ChunkedArray, size: int) -> pa.ChunkedArray:
    # Floor modulo for epoch ms (negative ts would need it too): ts - floor(ts / size) * size.
    floor = pc.cast(pc.floor(pc.divide(pc.cast(ts, pa.float64()), float(size))), pa.int64())
    return pc.subtract(ts, pc.multiply(floor, size))


def partials_schema() -> pa.Schema:
    """Columns of window_partials (for building partials by hand, as the sink tests do)."""
    text = [pa.field(c, pa.string()) for c in ("kind", "level", "target", "source", "group", "topic")]
    fields = [*text, pa.field("partition", pa.int32()), pa.field("window_start", pa.int64()),
              pa.field("max_ts", pa.int64()), pa.field("upstream_topic", pa.string())]
    for m in ALL_METRICS:
        fields += [pa.field(f"{m}__{s}", pa.float64()) for s in STATS]
        fields.append(pa.field(f"{m}__last_ts", pa.int64()))
    return pa.schema(fields)


def window_partials(flat: pa.Table) -> pa.Table:
    """Per (level, subject, 10 s window): n/sum/min/max/last and last_ts of every metric, the newest
    event ts (`max_ts`) and the upstream topic."""
    rows = _levels(flat)
    keys = [*KEY_COLUMNS, "window_start"]
    # Phase 1, per event ts: after it a (subject, window, ts) is one row, so the `last` of phase 2 is
    # the value at the greatest ts, ties already resolved by value.
    ops = ("sum", "sum", "min", "max", "max")
    first = [(f"{m}__{s}", op) for m in ALL_METRICS for s, op in zip(STATS, ops, strict=True)]
    first.append(("upstream_topic", "max"))
    by_ts = _renamed(rows.group_by([*keys, "ts"]).aggregate(first), first)
    by_ts = by_ts.sort_by([(k, "ascending") for k in [*keys, "ts"]])
    for m in ALL_METRICS:
        last_ts = pc.if_else(pc.is_valid(by_ts[f"{m}__last"]), by_ts["ts"], pa.scalar(None, pa.int64()))
        by_ts = by_ts.append_column(f"{m}__last_ts", last_ts)
    second = [("ts", "max"), ("upstream_topic", "max")]
    for m in ALL_METRICS:
        second += [(f"{m}__n", "sum"), (f"{m}__sum", "sum"), (f"{m}__min", "min"), (f"{m}__max", "max"),
                   (f"{m}__last", "last"), (f"{m}__last_ts", "max")]
    out = _renamed(by_ts.group_by(keys, use_threads=False).aggregate(second), second)
    return out.rename_columns(["max_ts" if c == "ts" else c for c in out.column_names])


def _renamed(table: pa.Table, aggregates: list[tuple[str, str]]) -> pa.Table:
    """Arrow names an aggregate `<column>_<function>`: back to the column's name."""
    names = {f"{column}_{function}": column for column, function in aggregates}
    return table.rename_columns([names.get(c, c) for c in table.column_names])


def latest_records(flat: pa.Table) -> list[dict[str, Any]]:
    """The newest record of each subject (greatest ts, then Kafka offset), None fields left out."""
    valid = flat.filter(pc.not_equal(flat["kind"], INVALID_KIND))
    if valid.num_rows == 0:
        return []
    ordered = valid.sort_by([(c, "ascending") for c in [*SUBJECT_COLUMNS, "ts", "offset"]])
    keep_nulls = pc.ScalarAggregateOptions(skip_nulls=False)
    newest = ordered.group_by(SUBJECT_COLUMNS, use_threads=False).aggregate(
        [(f, "last", keep_nulls) for f in LATEST_FIELDS])
    newest = newest.rename_columns([c.removesuffix("_last") for c in newest.column_names])
    return [{k: v for k, v in record.items() if v is not None} for record in newest.to_pylist()]


def invalid_excerpts(flat: pa.Table) -> dict[tuple[str, str, int, int], str]:
    invalid = flat.filter(pc.equal(flat["kind"], INVALID_KIND))
    if invalid.num_rows == 0:
        return {}
    invalid = invalid.append_column("window_start", pc.subtract(invalid["ts"], _mod(invalid["ts"],
                                                                                     FINEST_WINDOW.size_ms)))
    keys = ["target", "source", "partition", "window_start"]
    last = invalid.sort_by([(c, "ascending") for c in [*keys, "offset"]]).group_by(keys, use_threads=False) \
        .aggregate([("excerpt", "last")])
    return {(r["target"], r["source"], r["partition"], r["window_start"]): r["excerpt_last"] or ""
            for r in last.to_pylist()}
