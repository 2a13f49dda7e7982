"""A task's own writes of its partitions' and groups' latest values and lag verdicts: newest wins, decided in
the task, so that the driver keeps no state a field and does no work a field.

A field (a partition's or group's latest value, a partition's verdict) is replaced only by a value of equal or
newer `ts` (latest_writes' rule: a replayed or late report cannot roll a dashboard back; equal replaces, so a
replayed batch writes the same bytes again and leaves Redis as it was). A series' records all come to one
Kafka partition (raw_metrics.placement_key), so each field is written by one task, the one reading that Kafka
partition; the task keeps which fields it wrote and each one's `ts` in one string a Kafka partition
(redis_layout.written_record_key: Arrow IPC with LZ4, read with one GET and written in the MULTI of its
HSETs, so that the record says what Redis holds whatever moment a task is killed at). A field the record does
not hold (first met, the record lost or expired, a subject moved in by a raw-topic partition increase, a field
not written for FORGET_MS) is read from Redis once (HMGET, its JSON's `ts`). A hash's lifetime is set by a
PEXPIRE the first time the task writes it and renewed at most every EXPIRY_RENEWAL_MS, as the driver's
writer did (the time of the last renewal is in the record).

Subjects are capped per replication (subject_cap), decided by the driver over the whole batch: a task writes
only the fields of subjects the cap admitted in an earlier batch (a ZMSCORE of the fields it meets first; a
field in its record was admitted). A subject met for the first time (not in redis_layout.subjects_key yet) is
sent to the driver, which screens it and writes it with the replications' values; the task takes it over at
its next batch.

What it does not guard: a field two tasks write in one batch. Only a consumer group keyed by its group (a
driver older than s31) while its partition's reports are keyed by the partition, across an upgrade, is judged
in two tasks; each writes newest-wins over what it read, and the two may race.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.latest_writes import EXPIRY_RENEWAL_MS, NOTHING, hset_commands, pexpire_commands, stored_stamp
from aggregator.resp_commands import command_parts, execute, execute_in_multi, packed
from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

# The fields a task writes (hash key, field, the value's ts and JSON): offset_records.VALUES_SCHEMA.
ROWS_SCHEMA = pa.schema([("key", pa.string()), ("field", pa.string()), ("ts", pa.int64()),
                         ("json", pa.string())])
# The record: each field written, its ts, and when (the batch's clock, ms) its hash's lifetime was last set.
RECORD_SCHEMA = pa.schema([("key", pa.string()), ("field", pa.string()), ("ts", pa.int64()),
                           ("renewed", pa.int64())])
RECORD_IPC = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)
# A field whose ts is this much older than the task's newest report leaves its record (a stopped partition,
# a deleted topic, a subject moved to another Kafka partition): read from Redis again if it comes back. Well
# under the subject cap's forgetting (a day), so a field in a record belongs to an admitted subject.
FORGET_MS = EXPIRY_RENEWAL_MS
# target, source, member (subject_cap.member) of each row of a table of ROWS_SCHEMA; None where unknown
Subjects = Callable[[pa.Table], list[tuple[str, str, str] | None]]


@dataclass(frozen=True)
class TaskWrites:
    """Which Kafka partition's task writes (its record: redis_layout.written_record_key) and the batch's
    clock (ms), planned by the driver."""

    target: str
    raw_topic: str
    kafka_partition: int
    now_ms: int

    @property
    def key(self) -> str:
        return layout.written_record_key(self.target, self.raw_topic, self.kafka_partition)


@dataclass
class WriteStats:
    written: int = 0  # fields written
    known: int = 0  # fields the record held
    read: int = 0  # fields read from Redis (not in the record)
    deferred: int = 0  # fields of subjects not admitted yet: sent to the driver
    bytes: int = 0  # the record's bytes, read and written


def newest_of_fields(rows: pa.Table, ids: pa.Array) -> tuple[pa.Table, pa.Array]:
    """One row a field (key, field; `ids`: field_ids of the rows): its newest ts, of equal ones the later
    row; with their ids."""
    if rows.num_rows < 2:
        return rows, ids
    encoded = pc.dictionary_encode(ids)
    if len(encoded.dictionary) == len(ids):
        return rows, ids
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.lexsort((np.arange(len(codes)), rows["ts"].to_numpy(), codes))
    last = np.flatnonzero(np.append(codes[order][1:] != codes[order][:-1], True))
    at = pa.array(np.sort(order[last]))
    return rows.take(at), ids.take(at)


def decode_record(raw: bytes | None) -> pa.Table:
    if raw is None:
        return RECORD_SCHEMA.empty_table()
    table = pa.ipc.open_stream(raw).read_all()
    return pa.table({name: table[name].cast(RECORD_SCHEMA.field(name).type) for name in RECORD_SCHEMA.names},
                    schema=RECORD_SCHEMA).combine_chunks()


def encode_record(record: pa.Table) -> pa.Buffer:
    table = pa.table({"key": record["key"].combine_chunks().dictionary_encode(), "field": record["field"],
                      "ts": record["ts"], "renewed": record["renewed"]})
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema, options=RECORD_IPC) as writer:
        writer.write_table(table)
    return out.getvalue()


def field_ids(table: pa.Table) -> pa.Array:
    """`<key>\\x00<field>` of each row."""
    ids = pc.binary_join_element_wise(table["key"], table["field"], "\x00")
    return ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids


def write_own(client: redis.Redis, writes: TaskWrites, rows: pa.Table, subjects: Subjects
              ) -> tuple[pa.Table, pa.Array, WriteStats]:
    """Writes `rows` (ROWS_SCHEMA) where Redis holds no newer value, newest wins, with the task's record, in
    one MULTI. Returns the rows of subjects not admitted yet (for the driver to screen and write), the
    fields written (`<key>\\x00<field>`) and what it did."""
    stats = WriteStats()
    rows = rows.combine_chunks()
    rows, ids = newest_of_fields(rows, field_ids(rows))
    if not rows.num_rows:
        return ROWS_SCHEMA.empty_table(), pa.array([], pa.string()), stats
    raw = cast(bytes | None, client.get(writes.key))
    stats.bytes += len(raw or b"")
    try:
        record = decode_record(raw)
    except (pa.ArrowException, KeyError, ValueError) as exc:  # another layout's or damaged: read again
        LOG.warning("written record %s unreadable (%s): its fields read from Redis", writes.key, exc)
        record = RECORD_SCHEMA.empty_table()
    # Forgotten by event time, as a report's windows are (a rebuild reads hours-old reports).
    record = record.filter(pc.greater_equal(record["ts"], pc.max(rows["ts"]).as_py() - FORGET_MS))
    at = pc.fill_null(pc.index_in(ids, value_set=field_ids(record)), -1).to_numpy()
    known = at >= 0
    safe_at = np.where(known, at, 0)

    def held_of(column: str, none: int) -> np.ndarray:
        return np.where(known, record[column].to_numpy()[safe_at], none) if record.num_rows \
            else np.full(len(at), none, np.int64)

    held = held_of("ts", NOTHING)
    deferred = np.zeros(len(at), bool)
    unknown = np.flatnonzero(~known)
    stats.known, stats.read = int(known.sum()), len(unknown)
    if len(unknown):
        held[unknown], admitted = _read_unknown(client, rows.take(pa.array(unknown)), subjects)
        deferred[unknown] = ~admitted
    stats.deferred = int(deferred.sum())
    new_ts = rows["ts"].to_numpy()
    written = ~deferred & (new_ts >= held)
    stats.written = int(written.sum())
    # The record: its rows the batch did not name, then the batch's admitted fields at what Redis now holds.
    kept = np.ones(record.num_rows, bool)
    kept[at[known]] = False
    mine = np.flatnonzero(~deferred)
    renewed = held_of("renewed", 0)
    fresh = pa.table({"key": rows["key"].take(pa.array(mine)), "field": rows["field"].take(pa.array(mine)),
                      "ts": pa.array(np.maximum(new_ts, held)[mine], pa.int64()),
                      "renewed": pa.array(renewed[mine], pa.int64())}, schema=RECORD_SCHEMA)
    record = pa.concat_tables([record.filter(pa.array(kept)), fresh]).combine_chunks()
    # A hash written now whose lifetime this task has not set within EXPIRY_RENEWAL_MS (or never) is given it.
    written_rows = rows.filter(pa.array(written))
    args: list[pa.Array] = []
    counts: list[np.ndarray] = []
    if written_rows.num_rows:
        hset_args, hset_counts, hashes = hset_commands(written_rows["key"], written_rows["field"],
                                                       written_rows["json"])
        args.append(hset_args)
        counts.append(hset_counts)
        # (a hash is due when any of its fields' rows is: most batches none is, and this is one pass)
        stale = pc.less_equal(record["renewed"], writes.now_ms - EXPIRY_RENEWAL_MS)
        due = pa.array([], pa.string())
        if pc.any(stale).as_py():
            candidates = pc.unique(record["key"].filter(stale))
            due = candidates.filter(pc.is_in(candidates, value_set=hashes))
        if len(due):
            expiry_args, expiry_counts = pexpire_commands(due)
            args.append(expiry_args)
            counts.append(expiry_counts)
            now = pa.scalar(writes.now_ms, pa.int64())
            record = record.set_column(3, "renewed", pc.if_else(pc.is_in(record["key"], value_set=due), now,
                                                                record["renewed"]))
    blob = encode_record(record)
    stats.bytes += blob.size
    commands = packed(pa.concat_arrays(args), np.concatenate(counts)) if args else pa.py_buffer(b"")
    # The record's SET after the HSETs, in their MULTI: its value is binary, packed apart.
    set_record = command_parts("SET", writes.key, blob, "PX", str(layout.OFFSET_RECORD_TTL_MS))
    execute_in_multi(client, [commands, *set_record], sum(len(c) for c in counts) + 1)
    return rows.filter(pa.array(deferred)), ids.filter(pa.array(written)), stats


def _read_unknown(client: redis.Redis, rows: pa.Table, subjects: Subjects) -> tuple[np.ndarray, np.ndarray]:
    """Fields the record does not hold: the ts Redis holds of each (NOTHING: none), and whether its subject
    was admitted by the cap in an earlier batch. A query's first batches meet every field so (its first
    batch's go to the driver, its second's are not in the record yet): one HMGET a hash, packed by Arrow, and
    one ZMSCORE a replication."""
    named = subjects(rows)
    by_replication: dict[tuple[str, str], dict[str, float | None]] = {}
    for subject in named:
        if subject is not None:
            by_replication.setdefault(subject[:2], {})[subject[2]] = None
    pipe = client.pipeline(transaction=False)
    for (target, source), members in by_replication.items():
        pipe.zmscore(layout.subjects_key(target, source), list(members))
    answers = pipe.execute() if by_replication else []
    for members, scores in zip(by_replication.values(), answers, strict=True):
        members.update(dict(zip(list(members), scores, strict=True)))
    admitted = np.array([s is not None and by_replication[s[:2]][s[2]] is not None for s in named], bool)
    return _stored_ts(client, rows["key"], rows["field"]), admitted


def _stored_ts(client: redis.Redis, keys: pa.ChunkedArray, fields: pa.ChunkedArray) -> np.ndarray:
    """The ts of the value Redis holds at each (key, field) (NOTHING: none, or one latest_writes.stored_stamp
    would not take)."""
    by_key = pc.dictionary_encode(keys.combine_chunks())
    code = by_key.indices.to_numpy()
    order = np.argsort(code, kind="stable")  # a hash's fields together
    code = code[order]
    firsts = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]]))
    commands, n = len(firsts), len(code)
    # HMGET <key> <field> ...: the source entries are "HMGET", each command's key, the fields in order.
    place = np.empty(2 * commands + n, np.int64)
    starts = firsts + 2 * np.arange(commands)
    place[starts], place[starts + 1] = 0, 1 + np.arange(commands)
    first = np.zeros(n, bool)
    first[firsts] = True
    place[np.arange(n) + 2 * np.cumsum(first)] = 1 + commands + np.arange(n)
    source = pa.concat_arrays([pa.array(["HMGET"]), by_key.dictionary.take(pa.array(code[firsts])),
                               fields.combine_chunks().take(pa.array(order))])
    args, counts = pc.take(source, pa.array(place)), np.diff(np.append(starts, len(place)))
    answers = execute(client, packed(args, counts), commands)
    held = np.full(n, NOTHING, np.int64)
    held[order] = [_ts_of(raw) for answer in answers for raw in answer]
    return held


def _ts_of(raw: bytes | None) -> int:
    """latest_writes.stored_stamp's ts, by orjson where it reads an integer ts (the values this project
    writes): the rest as stored_stamp reads them."""
    if raw is None:
        return NOTHING
    try:
        value = orjson.loads(raw)
        ts = value.get("ts") if isinstance(value, dict) else None
    except orjson.JSONDecodeError:
        ts = None
    return ts if type(ts) is int else stored_stamp(raw)[0]
