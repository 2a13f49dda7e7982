"""The map side of a micro-batch: each Spark partition is parsed and aggregated where Spark reads it.

The sink runs `mapInArrow` over the batch's Kafka columns (query.kafka_columns). The Kafka source makes
one Spark partition of each Kafka partition, so every task gets its records in Arrow batches in an
executor's Python worker and applies the pure steps there: parse and validity rules (raw_records), late
records counted and dropped against the watermark the driver read, partial windows, the newest record
per subject and the invalid records' excerpts (window_partials). It then judges its partition and group
reports (offset_records: lag in seconds, lag verdicts and their latest values, over its Kafka partition's
offset records in Redis), each report's lag in seconds joining its partials as its own partition-level
partial, and writes their latest values and verdicts to Redis itself (task_writes, task_verdicts). A task
answers with one row: its partials, and the latest values and verdicts of subjects met for the first time
(the driver's subject cap screens those), as Arrow IPC streams. Raw
metrics are keyed by topic partition (raw_metrics.placement_key: a group's reports beside their
partition's), so a series' records share a Kafka partition, a group's task holds its partition's offset
windows, and a task's partials are already one row per series x window; the driver only merges what several
tasks share (whole-topic and replication rows, a subject keyed otherwise by an older driver), writes and
commits (redis_sink).

The one-row answer keeps Spark's schema at a few columns: a schema of the ~100 partial columns would cost
Catalyst analysis each batch and a conversion of every partial into Spark rows and back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator import long_lived, offset_records, task_writes, verdict_summaries, window_partials
from aggregator.raw_records import flat_table, late_counts, on_time
from aggregator.window_partials import BatchPartials
from clients import redis_connection
from contract import redis_layout as layout

# What a task sends the driver (Spark DDL and the same as Arrow).
SPARK_SCHEMA = ("worker_pid INT, records BIGINT, windows BINARY, latest BINARY, excerpts BINARY, "
                "late BINARY, judged_values BINARY, verdicts BINARY, stored_reads BIGINT, "
                "merge_wait_ms BIGINT")
PARTS_SCHEMA = pa.schema([("worker_pid", pa.int32()), ("records", pa.int64()), ("windows", pa.binary()),
                          ("latest", pa.binary()), ("excerpts", pa.binary()), ("late", pa.binary()),
                          ("judged_values", pa.binary()), ("verdicts", pa.binary()),
                          ("stored_reads", pa.int64()), ("merge_wait_ms", pa.int64())])
EXCERPT_KEYS = ("target", "source", "partition", "window_start")
# A task's answer, LZ4-compressed: each crosses the JVM (several copies on its heap: the Python worker's
# output, the task result, the driver's collect) to the driver, and the partials' columns are mostly
# repeats and nulls, so a tenth of the bytes travel for a few ms of CPU a task (bench/RESULTS.md, s26).
ANSWER_IPC = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=False)


@dataclass(frozen=True)
class PartitionPartials:
    """The function mapInArrow runs in each task; pickled with what the driver decided for the batch."""

    target: str | None  # records naming another target cluster are invalid (raw_records.flat_table)
    watermark_ms: int | None  # valid records whose window it closed are counted as late, in no window
    now_ms: int | None = None  # the driver's clock for the batch: event times far past it are invalid
    # Where the task keeps its offset records and the merge it waits for before reading stored windows;
    # without a Redis (tests of the pure steps), partition and group reports are not judged.
    redis_url: str | None = None
    merged: offset_records.MergeWait = offset_records.MergeWait()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        long_lived.freeze_worker_imports()
        answer = self._answer(list(batches))
        if answer is None:
            return
        yield answer
        # Spark has sent the answer on: the worker gives back what the task held, rather than keep its
        # largest task's size while it waits for the next batch.
        del answer
        long_lived.return_freed_memory()

    def _records_at(self, chunks: list[pa.RecordBatch]
                    ) -> tuple[redis.Redis, tuple[str, str], task_writes.TaskWrites] | None:
        """Where the task's offset records are (its Redis, their keys) and where it keeps what it wrote
        (task_writes); None when it judges nothing."""
        if self.redis_url is None or self.target is None:
            return None
        kafka_partition = _kafka_partition(chunks)
        now_ms = self.now_ms if self.now_ms is not None else int(time.time() * 1000)
        return (_client(self.redis_url), layout.offset_record_keys(self.target, *kafka_partition),
                task_writes.TaskWrites(self.target, *kafka_partition, now_ms))

    def _answer(self, chunks: list[pa.RecordBatch]) -> pa.RecordBatch | None:
        if not chunks or not any(chunk.num_rows for chunk in chunks):
            return None
        records = sum(chunk.num_rows for chunk in chunks)
        records_at = self._records_at(chunks)
        flat = flat_table(_taken(chunks), self.target, self.now_ms)
        late = late_counts(flat, self.watermark_ms)
        flat = on_time(flat, self.watermark_ms)
        values = offset_records.VALUES_SCHEMA.empty_table()
        verdicts = verdict_summaries.TABLE_SCHEMA.empty_table()
        stats = offset_records.RecordStats()
        if flat.num_rows == 0:  # every record late: only the count travels
            windows, latest = window_partials.partials_schema().empty_table(), pa.table({})
        else:
            windows, latest = window_partials.window_partials(flat), window_partials.latest_table(flat)
            if records_at is not None:
                client, keys, writes = records_at
                windows, values, verdicts, stats = offset_records.judge_partials(
                    client, keys, windows, latest, self.merged, writes)
        excerpts = window_partials.invalid_excerpts(flat)
        return pa.RecordBatch.from_pylist([{
            "worker_pid": os.getpid(), "records": records,
            "judged_values": _ipc(values), "verdicts": _ipc(verdicts), "stored_reads": stats.read,
            "merge_wait_ms": round(stats.waited_s * 1000),
            "windows": _ipc(_without_null_columns(windows)),
            "latest": _ipc(_without_null_columns(latest)),
            "excerpts": _ipc(pa.table({
                **{k: pa.array([key[i] for key in excerpts], t) for i, (k, t) in enumerate(zip(
                    EXCERPT_KEYS, (pa.string(), pa.string(), pa.int32(), pa.int64()), strict=True))},
                "excerpt": pa.array(list(excerpts.values()), pa.string())})),
            "late": _ipc(pa.table({"target": pa.array([t for t, _ in late], pa.string()),
                                   "source": pa.array([s for _, s in late], pa.string()),
                                   "count": pa.array(list(late.values()), pa.int64())})),
        }], schema=PARTS_SCHEMA)


_CLIENTS: dict[str, redis.Redis] = {}  # a worker's connection to Redis, kept from task to task


def _client(url: str) -> redis.Redis:
    client = _CLIENTS.get(url)
    if client is None:
        client = _CLIENTS[url] = redis_connection.connect(url)
    return client


def _kafka_partition(chunks: list[pa.RecordBatch]) -> tuple[str, int]:
    """The raw-metrics topic and Kafka partition a task reads: Spark's Kafka source makes one task of each
    Kafka partition's offset range (query.kafka_source_options sets no minPartitions, which would split one
    over several tasks, each then writing the same offset record)."""
    first = next(chunk for chunk in chunks if chunk.num_rows)
    topic, partition = first["topic"][0].as_py(), int(first["partition"][0].as_py())
    for chunk in chunks:
        if chunk.num_rows and (pc.any(pc.not_equal(chunk["topic"], topic)).as_py()
                               or pc.any(pc.not_equal(chunk["partition"], partition)).as_py()):
            raise ValueError("a task reading more than one Kafka partition: their offset records would mix")
    return topic, partition


@dataclass
class CollectedParts:
    """What the driver received for one batch: the merged partials and where they came from."""

    partials: BatchPartials
    records: int = 0  # raw records the tasks read
    tasks: int = 0
    worker_pids: frozenset[int] = frozenset()
    bytes: int = 0  # partials' bytes as they reached the driver
    latest_candidates: int = 0
    stored_reads: int = 0  # partitions the tasks read from the stored windows
    merge_wait_ms: int = 0  # the tasks' time waiting for the merge before those reads


def collect(parts: pa.Table) -> CollectedParts:
    """The tasks' answers (one row each, PARTS_SCHEMA) -> the batch's partials, as window_partials.partials
    and raw_records.late_counts give them for the batch as a whole."""
    # The blobs are read where they lie (no copy into Python bytes).
    rows = {name: [v.as_buffer() if isinstance(v, pa.BinaryScalar) else v.as_py() for v in parts[name]]
            for name in PARTS_SCHEMA.names}
    windows = window_partials.merge_partials([_table(b) for b in rows["windows"]])
    latest_parts = [_table(b) for b in rows["latest"]]
    latest = window_partials.with_schema(pa.concat_tables(latest_parts, promote_options="default"),
                                         window_partials.latest_schema()) if latest_parts \
        else window_partials.latest_schema().empty_table()
    excerpts: dict[tuple[str, str, int, int], str] = {}
    for blob in rows["excerpts"]:
        for r in _table(blob).to_pylist():
            excerpts[tuple(r[k] for k in EXCERPT_KEYS)] = r["excerpt"]
    late: dict[tuple[str, str], int] = {}
    for blob in rows["late"]:
        for r in _table(blob).to_pylist():
            late[(r["target"], r["source"])] = late.get((r["target"], r["source"]), 0) + r["count"]
    values = [_table(b) for b in rows["judged_values"]]
    verdicts = [_table(b) for b in rows["verdicts"]]
    partials = BatchPartials(
        windows, latest, excerpts, late,
        pa.concat_tables(values) if values else offset_records.VALUES_SCHEMA.empty_table(),
        pa.concat_tables(verdicts) if verdicts else verdict_summaries.TABLE_SCHEMA.empty_table())
    blobs = sum(b.size for name in ("windows", "latest", "excerpts", "late", "judged_values", "verdicts")
                for b in rows[name])
    return CollectedParts(partials, sum(rows["records"]), parts.num_rows, frozenset(rows["worker_pid"]),
                          blobs, latest.num_rows, sum(rows["stored_reads"]), sum(rows["merge_wait_ms"]))


def _taken(chunks: list[pa.RecordBatch]) -> pa.Table:
    """The task's records as one table, taken out of `chunks` (left empty): once flat_table has parsed
    them nothing holds the Kafka values through the rest of the task."""
    table = _narrow(pa.Table.from_batches(chunks))
    chunks.clear()
    return table


def _narrow(kafka: pa.Table) -> pa.Table:
    """Large (64-bit offset) strings and binaries as the parser takes them; a batch is far below 2 GiB."""
    narrowed = {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}
    schema = pa.schema([f.with_type(narrowed.get(f.type, f.type)) for f in kafka.schema])
    return kafka if schema == kafka.schema else kafka.cast(schema)


def _without_null_columns(table: pa.Table) -> pa.Table:
    """A partition reports a few of the metrics: the rest are null columns, restored by the driver
    (window_partials.merge_partials)."""
    return table.select([name for name in table.column_names if table[name].null_count < table.num_rows])


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=ANSWER_IPC) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(blob: pa.Buffer) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()
