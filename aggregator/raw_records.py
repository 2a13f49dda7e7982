"""Raw-metrics Kafka records (Arrow, as a micro-batch hands them over) -> flat typed rows, one a record.

The streaming query carries the Kafka columns only (query.kafka_columns); the JSON is parsed here, in
each Spark task's Python worker (partition_partials), by Arrow's JSON reader (raw_values). Parsed by
Spark (from_json and a projection of ~50 columns) every batch paid ~0.3-0.6 s of Catalyst analysis and
planning whatever its size, and ~1 s per 100k records; Arrow parses 100k in ~0.2 s.

Records that do not parse, or parse but are not valid raw metrics, become rows of kind `invalid` with
their Kafka partition, offset and an excerpt, so bad input is counted and logged, never fatal. Anyone
who may produce to the topic can send anything: values over MAX_VALUE_BYTES are not parsed, numbers
must lie within the contract's MAX_NUMBER, names must be legal Kafka names (`*` is the replication-wide
series), a record's source must be its topic's, and event time is judged against the aggregator's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from aggregator.raw_values import parse_values
from contract.kafka_names import ALIAS, TOPIC_ARROW, check_group
from contract.records.raw_metrics import (
    MAX_NUMBER,
    MAX_VALUE_BYTES,
    METRICS,
    READER_FIELD_TYPES,
    READER_KINDS,
    MetricKind,
)
from contract.redis_layout import ALL_TOPICS, FINEST_WINDOW, WHOLE_TOPIC
from contract.replication_policy import METRICS_TOPIC_SOURCE
from contract.untrusted import Rejected

# Raw metrics topics are `srm-metrics.<source>.internal` (contract.replication_policy.metrics_topic).
EXCERPT_CHARS = 200
# A record stamped further than this ahead of the aggregator's clock is invalid: its event time would
# push the watermark ahead and every on-time record after it would be dropped as late. The producer's
# CreateTime is no judge: a producer whose clock jumped sets both. Under half the default 30 s
# watermark delay, so hosts' clocks may differ a little. A replayed batch is judged by the clock of
# the replay, which only accepts more (ts <= now + skew grows), and is what a run then would give.
MAX_FUTURE_SKEW_MS = 15_000
MAX_PERIOD_MS = 24 * 3_600_000
_ALIAS_ARROW = f"^{ALIAS}$"
_COUNTERS = ("record_count", "byte_count")
INVALID_KIND = "invalid"
LATENCY_PARTS = ("count", "avg", "min", "max", "last")
# Fields of a replication report kept for its latest value (besides ts and period_ms).
REPLICATION_FIELDS = ("status", "error", "workers", "tasks", "last_heartbeat_ts", "topics_replicated",
                      "enabled")
# The driver's readers of its internal topics (a replication report's optional `readers`), one flat
# column per kind and field: `readers__<kind>__<field>` (latest_values.replication_latest nests them again).
READER_COLUMNS = {f"readers__{kind}__{name}": (kind, name)
                  for kind in READER_KINDS for name in READER_FIELD_TYPES}


def flat_table(kafka: pa.Table, target: str | None = None, now_ms: int | None = None) -> pa.Table:
    """One row per Kafka record (topic, partition, offset, kafka_ts in epoch ms, value): its subject, event
    ts and the value columns of its kind (null otherwise); invalid records as kind INVALID_KIND with
    their Kafka partition, offset and an excerpt. With `target`, a record naming another target
    cluster is invalid too: it was published to the wrong cluster and would otherwise be filed under a
    target this query does not own. A record whose event time is more than MAX_FUTURE_SKEW_MS after
    `now_ms` (the aggregator's clock, once per batch) is invalid."""
    kafka = kafka.combine_chunks()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    values = kafka["value"].combine_chunks()
    # Too large to be raw metrics: not parsed at all (null parses as invalid; the excerpt comes from
    # the original value).
    oversize = pc.fill_null(pc.greater(pc.binary_length(values), MAX_VALUE_BYTES), False)
    if pc.any(oversize).as_py():
        values = pc.if_else(oversize, pa.scalar(None, values.type), values)
    m, parsed = parse_values(values)
    topic_source = _source_of_topic(kafka["topic"].combine_chunks())
    valid = _valid(m, parsed, now_ms, target, topic_source)
    invalid = pc.invert(valid)
    kind = m["kind"]
    replication = pc.fill_null(pc.equal(kind, "replication"), False)
    subject_of_topic = pc.and_(valid, pc.invert(replication))
    invalid_target = pa.scalar(target) if target is not None else pc.fill_null(m["target"], "")
    partition = pc.if_else(replication, pa.scalar(WHOLE_TOPIC, pa.int32()), m["partition"])
    columns = {
        "kind": pc.if_else(valid, kind, INVALID_KIND),
        "target": pc.if_else(valid, m["target"], invalid_target),
        "source": topic_source,
        "group": pc.if_else(valid, pc.fill_null(m["group"], ""), ""),
        "topic": pc.if_else(subject_of_topic, m["topic"], ALL_TOPICS),
        "upstream_topic": _where(subject_of_topic, m["upstream_topic"]),
        "partition": pc.if_else(invalid, kafka["partition"], partition),
        # Unparseable records have no event time of their own: their Kafka timestamp stands in.
        "ts": pc.if_else(valid, m["ts"], kafka["kafka_ts"]),
        "offset": kafka["offset"],
        "excerpt": _excerpts(kafka["value"], invalid),
        "period_ms": _where(valid, m["period_ms"]),
    }
    for name, spec in METRICS.items():
        present = pc.and_(valid, pc.fill_null(pc.equal(kind, spec.subject), False))
        if spec.kind is MetricKind.LATENCY:
            columns |= {f"{name}__{part}": _where(present, pc.struct_field(m[name], [part]))
                        for part in LATENCY_PARTS}
        else:
            columns[name] = _where(present, m[name])
    replication_valid = pc.and_(valid, replication)
    columns |= {name: _where(replication_valid, m[name]) for name in REPLICATION_FIELDS}
    columns |= {column: _where(replication_valid, pc.struct_field(m["readers"], [kind, name]))
                for column, (kind, name) in READER_COLUMNS.items()}
    return pa.table(columns)


def _valid(m: pa.Table, parsed: pa.BooleanArray, now_ms: int, target: str | None,
           topic_source: pa.Array) -> pa.BooleanArray:
    kind, partition = m["kind"], m["partition"]
    partition_ok = pc.and_kleene(pc.is_valid(partition), pc.greater_equal(partition, 0))
    topic_partition = pc.and_kleene(pc.is_valid(m["topic"]), partition_ok)
    complete = pc.case_when(
        pc.make_struct(pc.equal(kind, "replication"), pc.equal(kind, "partition"), pc.equal(kind, "group")),
        pc.is_valid(m["status"]), topic_partition, pc.and_kleene(pc.is_valid(m["group"]), topic_partition),
        False)
    checks = [parsed, pc.equal(m["v"], 1), pc.is_valid(m["ts"]), pc.greater_equal(m["ts"], 0),
              pc.less_equal(m["ts"], now_ms + MAX_FUTURE_SKEW_MS),
              # Whoever may write `srm-metrics.<source>.internal` speaks for that source only.
              pc.equal(m["source"], topic_source),
              _per_distinct(m["source"], _alias), _per_distinct(m["target"], _alias), complete, *_in_range(m)]
    if target is not None:
        checks.append(pc.equal(m["target"], target))
    return pc.fill_null(_all_of(checks), False)


def _in_range(m: pa.Table) -> list[pa.Array]:
    """Checks of the optional fields: true where a field is absent. Numbers within +-MAX_NUMBER (so
    finite too: Arrow's reader takes NaN and Infinity, which would make every later sum nan; and one
    integer past float64's exact range failed the cast of the partial windows, so the batch, forever),
    counters and periods non-negative, names legal Kafka names (a topic `*` would merge into the
    replication-wide series)."""
    def absent_or(check: pa.Array) -> pa.Array:
        return pc.fill_null(check, True)

    checks = [absent_or(pc.and_(pc.greater(m["period_ms"], 0), pc.less_equal(m["period_ms"], MAX_PERIOD_MS)))]
    checks += [absent_or(check) for check in _within_max_number(m.columns)]
    checks += [absent_or(pc.greater_equal(m[name], 0)) for name in _COUNTERS]
    for name, spec in METRICS.items():
        if spec.kind is MetricKind.LATENCY:
            summary = m[name]
            checks.append(absent_or(pc.greater_equal(pc.struct_field(summary, ["count"]), 0)))
            parts = [pc.is_valid(pc.struct_field(summary, [part])) for part in LATENCY_PARTS]
            checks.append(pc.or_kleene(pc.is_null(summary), _all_of(parts)))  # present, whole
    for kind in READER_KINDS:  # a reader's count is a total: never negative; present, both fields are
        reader = pc.struct_field(m["readers"], [kind])
        checks.append(absent_or(pc.greater_equal(pc.struct_field(reader, ["rejected"]), 0)))
        complete = pc.and_(pc.is_valid(pc.struct_field(reader, ["rejected"])),
                           pc.is_valid(pc.struct_field(reader, ["alive"])))
        checks.append(pc.or_kleene(pc.is_null(reader), complete))
    for name in ("topic", "upstream_topic"):
        checks.append(absent_or(_per_distinct(m[name], _legal_topic)))
    checks.append(absent_or(_per_distinct(m["group"], _legal_group)))
    return checks


def _all_of(checks: list[pa.Array]) -> pa.Array:
    every = checks[0]
    for check in checks[1:]:
        every = pc.and_kleene(every, check)
    return every


def _within_max_number(columns: list[pa.ChunkedArray | pa.Array]) -> list[pa.Array]:
    """Whether each number (nested ones too) lies within +-MAX_NUMBER (the contract's rule: integers
    exact in the float64 windows, latency sums finite); NaN compares false. Null where absent."""
    checks = []
    for column in columns:
        if pa.types.is_struct(column.type):
            fields = [pc.struct_field(column, [i]) for i in range(column.type.num_fields)]
            checks += _within_max_number(fields)
        elif pa.types.is_int64(column.type) or pa.types.is_floating(column.type):
            low, high = pc.greater_equal(column, -MAX_NUMBER), pc.less_equal(column, MAX_NUMBER)
            checks.append(pc.and_kleene(low, high))
    return checks


def _per_distinct(values: pa.ChunkedArray | pa.Array, check: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """`check` of each value, evaluated once per distinct value: a batch's ~10^5 records name a few
    thousand topics and a few clusters, and a regex per record cost ~0.1 s a batch. Nulls stay null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = pc.dictionary_encode(values)
    return check(encoded.dictionary).take(encoded.indices)


def _alias(names: pa.Array) -> pa.Array:
    return pc.match_substring_regex(names, _ALIAS_ARROW)


def _legal_topic(names: pa.Array) -> pa.Array:
    return pc.and_(pc.match_substring_regex(names, TOPIC_ARROW),
                   pc.invert(pc.is_in(names, pa.array([".", ".."]))))


def _legal_group(names: pa.Array) -> pa.Array:
    """The contract's own rule (printable, as Python means it), per distinct name: a few a batch."""
    return pa.array([name is None or _is_group(name) for name in names.to_pylist()], pa.bool_())


def _is_group(name: str) -> bool:
    try:
        check_group(name)
    except Rejected:
        return False
    return True


def _source_of_topic(topics: pa.Array) -> pa.Array:
    """The source cluster named by each raw-metrics topic ("" for a topic not so named; a batch has a few
    topics)."""
    topics = pc.dictionary_encode(topics.cast(pa.string()))  # a column of no rows may be of type null
    parsed = pc.extract_regex(topics.dictionary, METRICS_TOPIC_SOURCE)
    sources = pc.fill_null(pc.struct_field(parsed, [0]), "")
    return sources.take(topics.indices)


def _where(mask: pa.BooleanArray, values: pa.Array) -> pa.Array:
    # Most columns are all null (another kind's fields) or kept whole (a batch of valid records).
    if values.null_count == len(values) or (mask.null_count == 0 and pc.all(mask).as_py()):
        return values
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def _excerpts(values: pa.Array, invalid: pa.BooleanArray) -> pa.Array:
    """The start of each invalid record's value as text (bytes that are not UTF-8 replaced)."""
    rows = pc.indices_nonzero(invalid)
    if len(rows) == 0:  # the common case: no Python object per record
        return pa.nulls(len(values), pa.string())
    excerpts: list[str | None] = [None] * len(values)
    for row, value in zip(rows.to_pylist(), values.take(rows).to_pylist(), strict=True):
        excerpts[row] = "<null value>" if value is None else value.decode("utf-8", "replace")[:EXCERPT_CHARS]
    return pa.array(excerpts, pa.string())


def on_time(flat: pa.Table, watermark_ms: int | None) -> pa.Table:
    """Drops valid records whose 10 s window ended at or before the watermark; invalid records are
    always counted."""
    if watermark_ms is None:
        return flat
    kept = _on_time(flat, watermark_ms)
    return flat if kept.null_count == 0 and pc.all(kept).as_py() else flat.filter(kept)


def late_counts(flat: pa.Table, watermark_ms: int | None) -> dict[tuple[str, str], int]:
    """(target, source) -> how many valid records on_time drops."""
    if watermark_ms is None:
        return {}
    late = flat.filter(pc.invert(_on_time(flat, watermark_ms)))
    if late.num_rows == 0:
        return {}
    counts = late.group_by(["target", "source"], use_threads=False).aggregate([("ts", "count")])
    columns = (counts[c].to_pylist() for c in ("target", "source", "ts_count"))
    return {(target, source): n for target, source, n in zip(*columns, strict=True)}


def _on_time(flat: pa.Table, watermark_ms: int) -> pa.ChunkedArray:
    # A window [start, start + size) ended by the watermark W unless start >= W's own window start.
    first_open = watermark_ms // FINEST_WINDOW.size_ms * FINEST_WINDOW.size_ms
    return pc.or_(pc.equal(flat["kind"], INVALID_KIND), pc.greater_equal(flat["ts"], first_open))
