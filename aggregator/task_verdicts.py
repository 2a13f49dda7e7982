"""A task's partitions' lag verdicts kept as the columns of their replications' summaries, and the summary
parts it leaves for the sink: the driver combines a few parts a replication and keeps no verdict.

A replication's summary (contract.lag_verdicts.summary_record, field `lag` of its status hash) reads every
partition's newest verdict, while its partitions are judged in several tasks, one a Kafka partition of the
raw-metrics topic (a partition's reports all come to one). So each task keeps its own partitions' verdicts,
as the columns a summary reads (verdict_summaries.TABLE_SCHEMA without the JSON, which the lag_verdicts_key
hash holds), in one string a Kafka partition (redis_layout.verdict_record_key: Arrow IPC, LZ4), read and
written whole every batch: the batch's verdicts replace their rows where Redis now holds them (task_writes
wrote them, newest wins). Rows stay as the verdict hash keeps its fields: a summary reads those still in
their lookback, and a replication whose verdicts all left it is summarised all the same (no partition), as
the driver did while it kept every verdict. From those rows, at the batch's clock, it makes each replication's
summary parts (lag_verdicts.summary_parts: partitions, the worst and most lagging one, counts, total lag,
the problems' records, the first moment one can change), and leaves them in one hash of its target
(redis_layout.verdict_parts_key, a field a Kafka partition). The sink reads that hash and combines each
replication's parts (lag_verdicts.combined_summary): the same summary as over every verdict at once.

STOP while the aggregator runs: a task ages every verdict it keeps at each batch, so a partition whose
reports stopped turns STOP in its task's parts while its Kafka partition still brings other reports. A
Kafka partition with no records runs no task: its parts stay as its last task left them, valid until their
`valid_until_ms`; the sink ages one whose moment has passed from that Kafka partition's record (at its
batch's clock, the same code) and leaves the parts it made in the hash, until the task runs again.

A verdict of a subject met for the first time (not yet admitted by the subject cap, task_writes) is
written by the sink, which also counts it in that batch's summary; the task keeps it pending and, once the
cap has admitted it, as its own (a subject the cap refused is dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.subject_cap import member
from aggregator.verdict_summaries import TABLE_SCHEMA, VerdictColumns
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

RECORD_SCHEMA = pa.schema([*(f for f in TABLE_SCHEMA if f.name != "text"), pa.field("pending", pa.bool_())])
RECORD_IPC = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
Pair = tuple[str, str]


@dataclass(frozen=True)
class VerdictPlace:
    """Where one Kafka partition's task keeps its verdicts and leaves its summary parts."""

    target: str
    raw_topic: str
    kafka_partition: int

    @property
    def record_key(self) -> str:
        return layout.verdict_record_key(self.target, self.raw_topic, self.kafka_partition)

    @property
    def parts_key(self) -> str:
        return layout.verdict_parts_key(self.target)

    @property
    def field(self) -> str:
        return f"{self.raw_topic}|{self.kafka_partition}"


def _ids(table: pa.Table) -> pa.Array:
    ids = pc.binary_join_element_wise(table["target"], table["source"], table["field"], "\x00")
    return ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids


def decode_record(raw: bytes | None) -> pa.Table:
    if raw is None:
        return RECORD_SCHEMA.empty_table()
    table = pa.ipc.open_stream(raw).read_all()
    return pa.table({f.name: table[f.name].cast(f.type) for f in RECORD_SCHEMA}, schema=RECORD_SCHEMA) \
        .combine_chunks()


def encode_record(record: pa.Table) -> bytes:
    table = pa.table({f.name: record[f.name].combine_chunks().dictionary_encode()
                      if f.name in ("target", "source", "topic") else record[f.name] for f in RECORD_SCHEMA})
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema, options=RECORD_IPC) as writer:
        writer.write_table(table)
    return cast(bytes, out.getvalue().to_pybytes())


def keep_and_summarise(client: redis.Redis, place: VerdictPlace, now_ms: int, fresh: pa.Table,
                       applied: np.ndarray, pending: np.ndarray) -> int:
    """One task's verdicts: its record with the batch's `fresh` verdicts (TABLE_SCHEMA) that Redis now holds
    (`applied`) or that wait for the cap (`pending`) in place; then its summary parts at `now_ms`, left in the
    target's hash. Returns the record's bytes, read and written."""
    raw = cast(bytes | None, client.get(place.record_key))
    try:
        record = decode_record(raw)
    except (pa.ArrowException, KeyError, ValueError) as exc:  # another layout's or damaged: start over
        LOG.warning("verdict record %s unreadable (%s): started again", place.record_key, exc)
        record = RECORD_SCHEMA.empty_table()
    record = _admitted(client, record)
    taken = fresh.filter(pa.array(applied | pending))
    now_pending = pa.array(pending[applied | pending])
    record = pa.concat_tables([
        record.filter(pc.invert(pc.is_in(_ids(record), value_set=_ids(taken)))),
        taken.drop_columns(["text"]).append_column("pending", now_pending).cast(RECORD_SCHEMA)])
    record = record.combine_chunks()
    parts = parts_of(client, record, now_ms, pa.table({"id": _ids(taken), "text": taken["text"]}))
    blob = encode_record(record)
    pipe = client.pipeline(transaction=False)
    pipe.set(place.record_key, blob, px=layout.OFFSET_RECORD_TTL_MS)
    pipe.hset(place.parts_key, place.field, encode_parts(parts, now_ms))
    pipe.pexpire(place.parts_key, layout.OFFSET_RECORD_TTL_MS)
    pipe.execute()
    return len(raw or b"") + len(blob)


def _admitted(client: redis.Redis, record: pa.Table) -> pa.Table:
    """The record with its pending rows (subjects the cap had not admitted when their verdict came) either
    its own (admitted since) or dropped (refused)."""
    pending = record["pending"].to_numpy(zero_copy_only=False)
    if not pending.any():
        return record
    at = np.flatnonzero(pending)
    rows = record.take(pa.array(at))
    members = [(t, s, member(topic, p, None)) for t, s, topic, p in zip(
        *(rows[c].to_pylist() for c in ("target", "source", "topic", "partition")), strict=True)]
    # One ZMSCORE a replication: a query's first batch leaves every verdict pending.
    by_replication: dict[Pair, dict[str, float | None]] = {}
    for target, source, name in members:
        by_replication.setdefault((target, source), {})[name] = None
    pipe = client.pipeline(transaction=False)
    for (target, source), names in by_replication.items():
        pipe.zmscore(layout.subjects_key(target, source), list(names))
    for names, scores in zip(by_replication.values(), pipe.execute(), strict=True):
        names.update(dict(zip(list(names), scores, strict=True)))
    admitted = np.array([by_replication[(t, s)][name] is not None for t, s, name in members], bool)
    keep = np.ones(record.num_rows, bool)
    keep[at[~admitted]] = False
    return record.set_column(record.schema.get_field_index("pending"), "pending",
                             pa.array(np.zeros(record.num_rows, bool))).filter(pa.array(keep))


def parts_of(client: redis.Redis, record: pa.Table, at_ms: int, texts: pa.Table | None = None
             ) -> list[dict[str, Any]]:
    """Each replication's summary parts at `at_ms` of a record's rows (pending ones left out: the sink
    counts those), the JSON a part lists taken from `texts` (columns `id`, as _ids, and `text`) or read from
    Redis."""
    own = record.filter(pc.invert(record["pending"]))
    if texts is not None and texts.num_rows and own.num_rows:
        at = pc.index_in(_ids(own), value_set=texts["id"].combine_chunks())
        text = texts["text"].combine_chunks().take(at)
    else:
        text = pa.nulls(own.num_rows, pa.string())
    with_text = own.drop_columns(["pending"]).append_column("text", text).select(TABLE_SCHEMA.names)
    out = []
    for (target, source), columns in VerdictColumns.by_replication(with_text).items():
        key = layout.lag_verdicts_key(target, source)

        def stored(rows: list[int], columns: VerdictColumns = columns, key: str = key) -> list[str]:
            values = cast(list[bytes | None], client.hmget(key, [columns.fields[r] for r in rows]))
            return [layout.encode_latest({}) if v is None else v.decode() for v in values]

        out.append({"target": target, "source": source, "parts": columns.parts(at_ms, stored)})
    return out


def encode_parts(parts: list[dict[str, Any]], at_ms: int) -> str:
    """A Kafka partition's parts (made at `at_ms`) as the parts hash holds them."""
    return layout.encode_latest({"ts": at_ms, "replications": parts})


def stored_parts(client: redis.Redis, target: str, now_ms: int) -> dict[Pair, list[dict[str, Any]]]:
    """The summary parts every task of `target` left, per replication, each valid at `now_ms`: parts made
    earlier whose `valid_until_ms` has passed are made again at `now_ms` from their Kafka partition's record
    (its task did not run since) and left in the hash in their place."""
    key = layout.verdict_parts_key(target)
    out: dict[Pair, list[dict[str, Any]]] = {}
    for raw_field, raw in cast(dict[bytes, bytes], client.hgetall(key)).items():
        field = raw_field.decode()
        try:
            entries = layout.decode_latest(raw)["replications"]
            if any(_stale(e["parts"], now_ms) for e in entries):
                raw_topic, kafka_partition = field.rsplit("|", 1)
                place = VerdictPlace(target, raw_topic, int(kafka_partition))
                entries = parts_of(client, decode_record(cast(bytes | None, client.get(place.record_key))),
                                   now_ms)
                client.hset(key, field, encode_parts(entries, now_ms))
        except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
            LOG.warning("skipping the lag summary parts of %s (%s)", field, exc)
            continue
        for entry in entries:
            out.setdefault((entry["target"], entry["source"]), []).append(entry["parts"])
    return out


def _stale(parts: Mapping[str, Any], now_ms: int) -> bool:
    until = parts.get("valid_until_ms")
    return int(parts["ts"]) < now_ms and until is not None and int(until) <= now_ms
