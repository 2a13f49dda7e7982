"""One micro-batch's flat rows (raw_records.flat_table) -> partial 10 s windows and latest records.

Vectorized on Arrow and numpy: per-record Python work would cost more than the batch, and Spark's
sort-based aggregation over a hundred aggregates took seconds for 25k records. A record's own windows are
runs of the records sorted by subject, window and ts, aggregated by numpy over the runs (_runs_aggregated);
the levels above, and batches with reports sharing a ts, by Arrow's hash aggregation.

Each record is kept at several levels, with n/sum/min/max/last per metric: a counter or gauge value is
one sample of itself, a latency summary is `count` samples with `sum = avg * count`.
- level `p`: the record's own subject (a remote topic-partition, a group's topic-partition, the
  replication as a whole, or for an invalid record its raw-metrics topic partition);
- level `t`: the whole remote topic (partition WHOLE_TOPIC) of partition and group records;
- level `r`: the whole replication (topic ALL_TOPICS), redis_layout.REPLICATION_LEVEL_METRICS of
  partition records only.
`last` is the value with the greatest (ts, value): whole-topic rows share a report's ts across
partitions, so ties break by value and no batch split can change the result. The sink merges with the
same rule (redis_layout.merge_windows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregator.raw_records import INVALID_KIND, LATENCY_PARTS, READER_COLUMNS, REPLICATION_FIELDS
from aggregator.raw_values import RECORD_SCHEMA
from contract.records.raw_metrics import DERIVED_METRICS, METRICS, MetricKind
from contract.redis_layout import (
    ALL_TOPICS,
    FINEST_WINDOW,
    INVALID_RECORDS_METRIC,
    REPLICATION_LEVEL_METRICS,
    WHOLE_TOPIC,
)

ALL_METRICS = (*METRICS, *DERIVED_METRICS, INVALID_RECORDS_METRIC)
STATS = ("n", "sum", "min", "max", "last")
KEY_COLUMNS = ["kind", "level", "target", "source", "group", "topic", "partition"]
SUBJECT_COLUMNS = ["kind", "target", "source", "topic", "partition", "group"]
# Columns of a latest record besides its subject (None values are left out, as in the raw JSON).
LATEST_FIELDS = ("ts", "period_ms", "upstream_topic", *[n for n, s in METRICS.items()
                                                         if s.kind is not MetricKind.LATENCY],
                 *REPLICATION_FIELDS, *READER_COLUMNS)
_NULL = pa.scalar(None, pa.float64())


@dataclass
class BatchPartials:
    windows: pa.Table  # one row per (level, subject, 10 s window); see window_partials
    # newest record per subject and task (valid records only), latest_schema's columns: a table, not a
    # dict a record (the driver built 100,000 of them a batch at a real target's cardinality)
    latest: pa.Table
    # invalid-records window (target, source, Kafka partition, window start) -> its last record's excerpt
    excerpts: dict[tuple[str, str, int, int], str]
    # (target, source) -> valid records dropped as late (raw_records.late_counts): in no window
    late: dict[tuple[str, str], int] = field(default_factory=dict)
    # The tasks' judging of the partition and group reports (offset_records): their latest values
    # (offset_records.VALUES_SCHEMA) and verdicts (verdict_summaries.TABLE_SCHEMA); None: not judged
    values: pa.Table | None = None
    verdicts: pa.Table | None = None


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
    return BatchPartials(pa.Table.from_pylist(wide, schema=partials_schema()), latest_schema().empty_table(),
                         {})


def partials(flat: pa.Table) -> BatchPartials:
    return BatchPartials(window_partials(flat), latest_table(flat), invalid_excerpts(flat))


def merge_partials(parts: list[pa.Table]) -> pa.Table:
    """Partial windows of several parts of one batch (its Kafka partitions, each aggregated on its own by
    window_partials) -> what window_partials gives for the whole batch. A (level, subject, window) in
    one part only is kept as it is; one in several (a topic's partitions read by several tasks, the
    replication level) is rolled up with the rule of merge_windows, which does not depend on the
    order of the parts."""
    if not parts:
        return partials_schema().empty_table()
    whole = pa.concat_tables([with_schema(part) for part in parts])
    if len(parts) < 2 or whole.num_rows == 0:
        return whole
    keys = [*KEY_COLUMNS, "window_start"]
    _, numbered = _numbered_subjects(whole.select(keys), keys)
    sizes = numbered.group_by("subject", use_threads=False).aggregate([("subject", "count")])
    shared_keys = sizes.filter(pc.greater(sizes["subject_count"], 1))["subject"]
    shared = pc.is_in(numbered["subject"], value_set=shared_keys.combine_chunks())
    if not pc.any(shared).as_py():
        return whole
    rows = whole.filter(shared)
    metrics = [m for m in ALL_METRICS if rows[f"{m}__n"].null_count < rows.num_rows]
    return pa.concat_tables([whole.filter(pc.invert(shared)), with_schema(roll_up(rows, metrics))])


def _present_metrics(flat: pa.Table) -> list[str]:
    """The metrics some record of the batch carries: aggregating the others would only make nulls."""
    columns = {name: f"{name}__count" if spec.kind is MetricKind.LATENCY else name
               for name, spec in METRICS.items()}
    present = [name for name, column in columns.items() if flat[column].null_count < flat.num_rows]
    if pc.any(pc.equal(flat["kind"], INVALID_KIND)).as_py():
        present.append(INVALID_RECORDS_METRIC)
    return present


def _samples(flat: pa.Table, metrics: list[str]) -> dict[str, pa.Array]:
    """n/sum/min/max/last columns of the given metrics, one row per flat row."""
    out: dict[str, Any] = {}
    for name in metrics:
        if name == INVALID_RECORDS_METRIC:
            invalid = pc.equal(flat["kind"], INVALID_KIND)
            offset = pc.cast(flat["offset"], pa.float64(), safe=False)  # Kafka's, past 2^53 never
            one = pc.if_else(invalid, 1.0, _NULL)
            parts = [one, one] + [pc.if_else(invalid, offset, _NULL)] * 3
        elif METRICS[name].kind is MetricKind.LATENCY:
            count = pc.cast(flat[f"{name}__count"], pa.float64())
            parts = [count, pc.multiply(flat[f"{name}__avg"], count), flat[f"{name}__min"],
                     flat[f"{name}__max"], flat[f"{name}__last"]]
        else:
            value = pc.cast(flat[name], pa.float64())
            parts = [pc.if_else(pc.is_valid(value), 1.0, _NULL), value, value, value, value]
        out |= {f"{name}__{s}": pc.cast(p, pa.float64()) for s, p in zip(STATS, parts, strict=True)}
    return out


def _own_windows(flat: pa.Table, metrics: list[str]) -> pa.Table:
    """Level `p`. Invalid records are aggregated apart from the valid ones: a burst of them shares one
    Kafka timestamp, which sent every row of the batch through the path of reports sharing a ts, and
    their metric gave every valid row five more columns of nulls (a batch with 5 % bad records cost
    its windows twice the time of the same batch clean)."""
    if INVALID_RECORDS_METRIC not in metrics:
        return _subject_windows(_own_rows(flat, metrics), metrics)
    invalid = pc.equal(flat["kind"], INVALID_KIND)
    parts = []
    # Only the columns the samples are made of are filtered (a flat row has ~60).
    for rows, kept in ((pc.invert(invalid), [m for m in metrics if m != INVALID_RECORDS_METRIC]),
                       (invalid, [INVALID_RECORDS_METRIC])):
        part = flat.select(_own_columns(kept)).filter(rows)
        if part.num_rows:
            parts.append(_subject_windows(_own_rows(part, kept), kept))
    return pa.concat_tables(parts, promote_options="default")


_OWN_KEYS = ("kind", "target", "source", "group", "topic", "partition", "upstream_topic", "ts")


def _own_columns(metrics: list[str]) -> list[str]:
    """The flat columns _own_rows reads for these metrics."""
    columns = list(_OWN_KEYS)
    for name in metrics:
        if name == INVALID_RECORDS_METRIC:
            columns.append("offset")
        elif METRICS[name].kind is MetricKind.LATENCY:
            columns += [f"{name}__{part}" for part in LATENCY_PARTS]
        else:
            columns.append(name)
    return columns


def _own_rows(flat: pa.Table, metrics: list[str]) -> pa.Table:
    """Level `p`: each record as a sample of its own subject."""
    ts = flat["ts"]
    base = {c: flat[c] for c in _OWN_KEYS if c != "ts"}
    base |= {"ts": ts, "window_start": window_starts(ts, FINEST_WINDOW.size_ms)}
    level = pa.repeat(pa.scalar("p", pa.string()), flat.num_rows)
    return pa.table(base | _samples(flat, metrics) | {"level": level})


def relabel(table: pa.Table, **values: Any) -> pa.Table:
    """`table` with the named columns set to one value (same types)."""
    for name, value in values.items():
        i = table.schema.get_field_index(name)
        column_type = table.schema.field(i).type
        # A repeat, not a Python list of one value a row: a batch has ~10^5 rows.
        table = table.set_column(i, name, pa.repeat(pa.scalar(value, column_type), table.num_rows))
    return table


def window_starts(ts: pa.ChunkedArray | pa.Array, size_ms: int) -> pa.ChunkedArray | pa.Array:
    """Start of the `size_ms` window holding each epoch-ms ts (floor, so negative ts work too)."""
    # Unsafe casts: an invalid record's ts is its Kafka timestamp, which a producer sets (CreateTime) and
    # may set past float64's exact integers; a window start a few ms off is no harm, a failed task is.
    windows = pc.divide(pc.cast(ts, pa.float64(), safe=False), float(size_ms))
    floor = pc.cast(pc.floor(windows), pa.int64(), safe=False)
    return pc.multiply(floor, size_ms)


@cache  # a schema is immutable, and ~100 fields built anew at every with_schema cost for nothing
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
    event ts (`max_ts`) and the upstream topic.

    The records make the `p` level; the `t` level is rolled up from its partials and the `r` level from
    those (a topic's partitions are a few partials a window, not every record again)."""
    metrics = _present_metrics(flat)
    own = _own_windows(flat, metrics)
    topic = roll_up(relabel(own.filter(pc.is_in(own["kind"], pa.array(["partition", "group"]))),
                              level="t", partition=WHOLE_TOPIC), metrics)
    # Merged across topics as a reader merges topic series (offsets are left out: they do not add up).
    counters = [m for m in metrics if m in REPLICATION_LEVEL_METRICS]
    dropped = [f"{m}__{s}" for m in metrics if m not in counters for s in (*STATS, "last_ts")]
    partition_topics = topic.filter(pc.equal(topic["kind"], "partition")).drop_columns(dropped)
    whole = roll_up(relabel(partition_topics, level="r", topic=ALL_TOPICS, upstream_topic=None), counters)
    return pa.concat_tables([with_schema(t) for t in (own, topic, whole)])


def _subject_windows(rows: pa.Table, metrics: list[str]) -> pa.Table:
    """Samples -> one partial per (subject, window); `last` is the value at the greatest ts, ties broken
    by the greater value (phase 1 keeps one row per ts). Grouped by a subject number: on the ~10^5 rows
    of a batch, string keys cost several times more. A subject's records come in ts order (one Kafka
    partition each, in the order they were reported): then they are grouped where they lie, and only a
    batch with records out of order pays for reordering its ~50 columns."""
    subjects, rows = _numbered_subjects(rows, KEY_COLUMNS)
    keys = ["subject", "window_start"]
    ops = ("sum", "sum", "min", "max", "max")
    first = [(f"{m}__{s}", op) for m in metrics for s, op in zip(STATS, ops, strict=True)]
    first.append(("upstream_topic", "max"))
    order = [(k, "ascending") for k in [*keys, "ts"]]
    sorted_rows = pc.sort_indices(rows.select([*keys, "ts"]), sort_keys=order)
    subject, start, ts = (rows[c].combine_chunks().take(sorted_rows) for c in (*keys, "ts"))
    same_window = pc.and_(pc.equal(subject[1:], subject[:-1]), pc.equal(start[1:], start[:-1]))
    same_ts = pc.and_(same_window, pc.equal(ts[1:], ts[:-1]))
    second = [("ts", "max"), ("upstream_topic", "max")]
    for m in metrics:
        second += [(f"{m}__n", "sum"), (f"{m}__sum", "sum"), (f"{m}__min", "min"), (f"{m}__max", "max"),
                   (f"{m}__last", "last"), (f"{m}__last_ts", "max")]
    shared_ts = pc.any(same_ts).as_py()  # several reports at one ts
    # Otherwise each (subject, window)'s records in ts order, one ts a record: aggregated as runs of the
    # sorted order, which is how Arrow's hash aggregation below sees them.
    out = None if shared_ts else _runs_aggregated(rows, sorted_rows.to_numpy(),
                                                  same_window.to_numpy(zero_copy_only=False), metrics)
    if out is None:
        if shared_ts:
            by_ts = _one_row_a_ts(rows, sorted_rows, same_ts, [*keys, "ts"], first).sort_by(order)
        elif pc.all(pc.or_(pc.invert(same_window), pc.greater(sorted_rows[1:], sorted_rows[:-1]))).as_py():
            by_ts = rows  # every window's records already in ts order
        else:
            by_ts = rows.take(sorted_rows)
        for m in metrics:
            last_ts = pc.if_else(pc.is_valid(by_ts[f"{m}__last"]), by_ts["ts"], pa.scalar(None, pa.int64()))
            by_ts = by_ts.append_column(f"{m}__last_ts", last_ts)
        out = _renamed(by_ts.group_by(keys, use_threads=False).aggregate(second), second)
        out = out.sort_by([(k, "ascending") for k in keys])  # the order of a batch read in key order
    named = subjects.take(out["subject"])
    out = pa.table({**{c: named[c] for c in KEY_COLUMNS},
                    **{c: out[c] for c in out.column_names if c != "subject"}})
    return out.rename_columns(["max_ts" if c == "ts" else c for c in out.column_names])


def _runs_aggregated(rows: pa.Table, order: np.ndarray, same_window: np.ndarray,
                     metrics: list[str]) -> pa.Table | None:
    """_subject_windows' second aggregation where no two records of a window share a ts: each (subject,
    window) is a run of `order` (rows sorted by subject, window start, ts; `same_window`: whether each
    sorted row after the first is in its predecessor's window), its records in ts order, so a run's
    `last` is its last non-null value and its `last_ts` that row's ts. Numpy over the runs: Arrow's hash
    aggregation of a task's ~40 columns cost ~0.1 CPU s a task at 50,000 subjects, hashing keys whose
    groups the sort had already found. The same values as that aggregation: sums added in the runs' order
    (np.add.at is sequential, as Arrow's grouped sum), nulls where a run has no value. None (the caller
    aggregates with Arrow) where a value is NaN or -0.0, whose min and max the two might order otherwise."""
    count = len(order)
    if count == 0:
        return None
    run = np.zeros(count, np.int64)
    run[1:] = np.cumsum(~same_window)
    runs = int(run[-1]) + 1
    position = np.arange(count)
    columns: dict[str, pa.Array] = {}

    def numbers(name: str) -> tuple[np.ndarray, np.ndarray]:
        column = one_array(rows[name]).take(pa.array(order))
        valid = np.ones(count, bool) if column.null_count == 0 else \
            column.is_valid().to_numpy(zero_copy_only=False)
        return column.to_numpy(zero_copy_only=False), valid

    def last_of(valid: np.ndarray) -> np.ndarray:
        at = np.full(runs, -1, np.int64)
        np.maximum.at(at, run[valid], position[valid])
        return at

    ts, ts_valid = numbers("ts")
    if ts.dtype != np.int64 or not ts_valid.all():
        return None
    newest = last_of(ts_valid)
    columns["ts"] = pa.array(ts[np.maximum(newest, 0)], pa.int64(), mask=newest < 0)
    topics = one_array(rows["upstream_topic"]).take(pa.array(order))
    columns["upstream_topic"] = _run_max_text(topics, run, runs)
    for m in metrics:
        for stat in STATS:
            values, valid = numbers(f"{m}__{stat}")
            if values.dtype != np.float64:
                return None
            present = values[valid]
            if np.isnan(present).any() or ((present == 0) & np.signbit(present)).any():
                return None
            at = run[valid]
            none = np.bincount(at, minlength=runs) == 0
            if stat == "last":
                last = last_of(valid)
                columns[f"{m}__last"] = pa.array(values[np.maximum(last, 0)], pa.float64(), mask=none)
                columns[f"{m}__last_ts"] = pa.array(ts[np.maximum(last, 0)], pa.int64(), mask=none)
                continue
            if stat in ("n", "sum"):
                out = np.zeros(runs)
                np.add.at(out, at, present)
            elif stat == "min":
                out = np.full(runs, np.inf)
                np.minimum.at(out, at, present)
            else:
                out = np.full(runs, -np.inf)
                np.maximum.at(out, at, present)
            columns[f"{m}__{stat}"] = pa.array(out, pa.float64(), mask=none)
    firsts = order[np.flatnonzero(np.concatenate([[True], ~same_window]))]
    keys = rows.select(["subject", "window_start"]).take(pa.array(firsts))
    return pa.table({"subject": keys["subject"], "window_start": keys["window_start"], **columns})


def _run_max_text(text: pa.Array, run: np.ndarray, runs: int) -> pa.Array:
    """The greatest of each run's strings (Arrow's order: bytes), null where a run has none."""
    encoded = pc.dictionary_encode(text)
    if len(encoded.dictionary) == 0:
        return pa.nulls(runs, text.type)
    by_text = pc.sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(by_text), np.int64)
    rank[by_text] = np.arange(len(by_text))
    indices = encoded.indices
    valid = np.ones(len(text), bool) if indices.null_count == 0 else \
        indices.is_valid().to_numpy(zero_copy_only=False)
    ranked = np.full(len(text), -1, np.int64)
    ranked[valid] = rank[indices.to_numpy(zero_copy_only=False)[valid].astype(np.int64)]
    greatest = np.full(runs, -1, np.int64)
    np.maximum.at(greatest, run, ranked)
    return _masked(encoded.dictionary.take(pa.array(by_text[np.maximum(greatest, 0)])), greatest < 0)


def _masked(values: pa.Array, none: np.ndarray) -> pa.Array:
    """`values` with nulls where `none`."""
    if not none.any():
        return values
    return pc.if_else(pa.array(none), pa.scalar(None, values.type), values)


def _one_row_a_ts(rows: pa.Table, sorted_rows: pa.Array, same_ts: pa.BooleanArray, keys: list[str],
                  aggregates: list[tuple[str, str]]) -> pa.Table:
    """`rows` with those sharing their `keys` (subject, window, ts) made one by `aggregates`. Only those
    are grouped: invalid records that came in a burst share one Kafka timestamp, and grouping the whole
    batch for them made its other rows cost twice as much."""
    shared = same_ts.to_numpy(zero_copy_only=False)
    involved = np.zeros(len(shared) + 1, bool)
    involved[:-1] |= shared
    involved[1:] |= shared
    order = sorted_rows.to_numpy()
    grouped = _renamed(rows.take(order[involved]).group_by(keys, use_threads=False).aggregate(aggregates),
                       aggregates)
    alone = rows.take(order[~involved]).select(grouped.column_names)
    return pa.concat_tables([alone, grouped.cast(alone.schema)])


def subject_numbers(rows: pa.Table, columns: list[str]) -> tuple[pa.Table, np.ndarray]:
    """The distinct values of `columns` (a row each, in order of first appearance) and each row's number
    of its values there."""
    subjects, numbered = _numbered_subjects(rows.select(columns), columns)
    return subjects, numbered["subject"].to_numpy()


def _numbered_subjects(rows: pa.Table, columns: list[str]) -> tuple[pa.Table, pa.Table]:
    """The distinct values of `columns` (one row per subject) and `rows` with those columns replaced by
    `subject`, the number of its row there (subjects numbered in order of first appearance)."""
    number = _subject_numbers(rows, columns)
    ever = np.maximum.accumulate(number.to_numpy())
    firsts = np.flatnonzero(np.concatenate([ever[:1] >= 0, ever[1:] > ever[:-1]]))  # a new greatest number
    subjects = rows.select(columns).take(firsts)
    return subjects, rows.drop_columns(columns).append_column("subject", number)


def _subject_numbers(rows: pa.Table, columns: list[str]) -> pa.Int64Array:
    """Each row's number of its values of `columns`, in order of first appearance. A column at a time:
    each column's values numbered, then the pair (subject so far, that number) numbered; a null is a
    value of its own. A hash of a few short values and of int64 pairs costs less than one of the
    columns joined as text (~14 -> ~10 ms on a batch's 10^5 rows, paid by the own windows and the
    latest records each)."""
    number = pa.array(np.zeros(rows.num_rows, np.int64))
    for name in columns:
        encoded = pc.dictionary_encode(one_array(rows[name]), null_encoding="encode")
        if len(encoded.dictionary) > 1:  # one value leaves the numbers as they are
            pairs = pc.add(pc.multiply(number, len(encoded.dictionary)), pc.cast(encoded.indices, pa.int64()))
            number = pc.cast(pc.dictionary_encode(pairs).indices, pa.int64())
    return number


def one_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as one Arrow array (no copy when it is one already)."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def roll_up(partials: pa.Table, metrics: list[str]) -> pa.Table:
    """Partials of several subjects relabelled as one -> one partial per (subject, window): each metric's
    `last` the one of greatest (last ts, value), as redis_layout.merge_windows merges. Grouped by one
    number per (subject, window); only the three columns a metric's `last` is chosen by are sorted."""
    keys = [*KEY_COLUMNS, "window_start"]
    groups, numbered = _numbered_subjects(partials, keys)
    ops = [("max_ts", "max"), ("upstream_topic", "max")]
    for m in metrics:
        ops += [(f"{m}__n", "sum"), (f"{m}__sum", "sum"), (f"{m}__min", "min"), (f"{m}__max", "max")]
    # Every aggregation below gives the groups by their number, so their rows line up with `groups`.
    out = _renamed(numbered.group_by("subject", use_threads=False).aggregate(ops), ops).sort_by("subject")
    for m in metrics:
        chosen = numbered.select(["subject", f"{m}__last_ts", f"{m}__last"])
        by_last = pc.sort_indices(chosen, sort_keys=[(c, "ascending") for c in chosen.schema.names])
        newest = chosen.take(by_last)
        lasts = [(f"{m}__last", "last"), (f"{m}__last_ts", "last")]
        newest = newest.group_by("subject", use_threads=False).aggregate(lasts).sort_by("subject")
        for column, function in lasts:
            out = out.append_column(column, newest[f"{column}_{function}"])
    named = groups.take(out["subject"])
    out = pa.table({**{c: named[c] for c in keys}, **{c: out[c] for c in out.column_names if c != "subject"}})
    return out.sort_by([(k, "ascending") for k in keys])  # in key order, as before numbering


def with_schema(table: pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """The columns of `schema` (partials_schema by default), absent ones (metrics) as nulls."""
    schema = schema or partials_schema()
    present = set(table.column_names)
    # Arrays are immutable: one null column of each type stands in for every absent column of it (a
    # task's partials carry a few of the ~100 columns, and a null column each was paid for in the driver
    # every batch).
    nulls: dict[pa.DataType, pa.Array] = {}
    columns = []
    for f in schema:
        if f.name in present:
            column = table[f.name]
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            if f.type not in nulls:
                nulls[f.type] = pa.nulls(table.num_rows, f.type)
            columns.append(nulls[f.type])
    return pa.table(columns, schema=schema)


def _renamed(table: pa.Table, aggregates: list[tuple[str, str]]) -> pa.Table:
    """Arrow names an aggregate `<column>_<function>`: back to the column's name."""
    names = {f"{column}_{function}": column for column, function in aggregates}
    return table.rename_columns([names.get(c, c) for c in table.column_names])


def latest_records(flat: pa.Table) -> list[dict[str, Any]]:
    """The newest record of each subject (greatest ts, then Kafka offset), None fields left out."""
    return records_of(latest_table(flat))


def records_of(latest: pa.Table) -> list[dict[str, Any]]:
    """Rows of latest_table as the sink takes them: dicts without their None fields."""
    return [{k: v for k, v in record.items() if v is not None} for record in latest.to_pylist()]


@cache
def latest_schema() -> pa.Schema:
    """Columns of latest_table (subject and LATEST_FIELDS), typed as raw_records.flat_table types them."""
    types = {f.name: f.type for f in RECORD_SCHEMA}
    readers = RECORD_SCHEMA.field("readers").type
    types |= {column: readers.field(kind).type.field(name).type
              for column, (kind, name) in READER_COLUMNS.items()}
    return pa.schema([pa.field(name, types[name]) for name in [*SUBJECT_COLUMNS, *LATEST_FIELDS]])


def latest_of(records: Iterable[Mapping[str, Any]]) -> pa.Table:
    """Latest records given as dicts (as latest_records gives them) as latest_table's rows: how tests and
    tools hand the sink reports. Fields outside latest_schema are left out; a missing group is ""."""
    table = pa.Table.from_pylist([dict(r) for r in records], schema=latest_schema())
    return table.set_column(table.schema.get_field_index("group"), "group", pc.fill_null(table["group"], ""))


def newest_of_subjects(latest: pa.Table) -> pa.Table:
    """`latest` (latest_table rows of several tasks) with one row a subject: its greatest ts, of equal ts the
    first; subjects in the order they first come. A subject's records share a Kafka partition and so a task
    (all carry one key, raw_metrics.placement_key): a copy from another task is a writer's that keys them
    otherwise (a driver that keyed a group's reports by the group)."""
    if latest.num_rows < 2:
        return latest
    subjects, number = subject_numbers(latest, SUBJECT_COLUMNS)
    if subjects.num_rows == latest.num_rows:
        return latest
    ts = latest["ts"].to_numpy()
    order = np.lexsort((np.arange(latest.num_rows), -ts, number))
    numbers = number[order]
    first = np.concatenate([[True], numbers[1:] != numbers[:-1]])
    return latest.take(order[first])


def latest_table(flat: pa.Table) -> pa.Table:
    """latest_records as one Arrow row per subject (subject columns and LATEST_FIELDS)."""
    rows = flat.select([*SUBJECT_COLUMNS, "offset", *LATEST_FIELDS])
    if rows.num_rows == 0:
        return rows.select([*SUBJECT_COLUMNS, *LATEST_FIELDS])
    # Invalid records are subjects of their own (kind INVALID_KIND), dropped from the newest rows: a
    # filter of every row's ~40 columns cost a batch with a few invalid records more than the numbering.
    subjects, numbered = _numbered_subjects(rows, SUBJECT_COLUMNS)
    # The last row of each subject in (subject, ts, offset) order: a take of one row a subject.
    order = pc.sort_indices(numbered.select(["subject", "ts", "offset"]),
                            sort_keys=[(c, "ascending") for c in ("subject", "ts", "offset")])
    subject = numbered["subject"].combine_chunks().take(order)
    last_of_subject = pc.not_equal(subject, pa.concat_arrays([subject[1:], pa.array([-1], pa.int64())]))
    newest = numbered.take(order.filter(last_of_subject))
    named = subjects.take(newest["subject"])
    latest = pa.table({**{c: named[c] for c in SUBJECT_COLUMNS}, **{c: newest[c] for c in LATEST_FIELDS}})
    valid = pc.not_equal(latest["kind"], INVALID_KIND)
    return latest if pc.all(valid).as_py() else latest.filter(valid)


def invalid_excerpts(flat: pa.Table) -> dict[tuple[str, str, int, int], str]:
    invalid = flat.filter(pc.equal(flat["kind"], INVALID_KIND))
    if invalid.num_rows == 0:
        return {}
    invalid = invalid.append_column("window_start", window_starts(invalid["ts"], FINEST_WINDOW.size_ms))
    keys = ["target", "source", "partition", "window_start"]
    last = invalid.sort_by([(c, "ascending") for c in [*keys, "offset"]]).group_by(keys, use_threads=False) \
        .aggregate([("excerpt", "last")])
    return {(r["target"], r["source"], r["partition"], r["window_start"]): r["excerpt_last"] or ""
            for r in last.to_pylist()}
