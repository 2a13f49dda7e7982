"""The window merge as Spark's own stateful aggregation, a prototype measured at a real target's shape: the
merge's state on the executors (Spark's state store), the updated windows written to Redis by the executors,
nothing a series in the driver.

Today the executors make partial 10 s windows (aggregator/partition_partials.py) and the driver's merge
thread merges them into the stored 10 s / 1 min / 1 h windows, keeping an Arrow copy of the recent ones
(window_writer, stored_windows). Here the tasks' same partials (window_partials) go, a row a subject, window
size and window, into a streaming groupBy(subject, size, window end), output mode update: every metric's n
and sum added, min, max, and `last` the value of greatest (last ts, value) as redis_layout.merge_windows
(max_by over one decimal packing both, so ties break by value), the window's end its event time (its state
dropped --delay-ms after it ends, the aggregator's watermark delay; later rows dropped as late). A batch's
updated windows are written whole by the executors (foreachBatch -> mapInArrow): members by
member_text.member_column, a Lua call per 200 keys setting each key's windows with one HSET (and its newest
start, redis_layout.NEWEST_FIELD, when it moves; then its trim and lifetime once a trim period, as the merge
does), packed as RESP by resp_commands. Each write is the window's whole value, so a replayed batch writes
the same values again: no batch id.

Per --series (default 10,000 then 100,000), the same records a batch (--max-offsets, 200k), in a live target's
shape (each series reporting every --period-ms, 5 s, of event time), --batches batches, on a real broker,
Redis and the aggregator's SparkSession (local[2]), for each of --stores:
- rocksdb: Spark's RocksDB state store (changelog checkpointing); hdfs: the default, state on the JVM's heap
  (at 100,000 series it needs more than the aggregator's 512 MB heap: give --spark-conf spark.driver.memory);
- none: the aggregator's own tasks (PartitionPartials, collected as the sink collects them) and no merge:
  what a merge's cost adds to, in either design.
With --merge-cpu, bench/merge_cpu.py (the current merge, in its process, on its own Redis) runs at the same
shape before each size's runs. Per batch, by process: CPU seconds (the Spark JVM with its executor task
threads, the Python workers with the writer tasks' own share, the driver's Python, Redis, the broker), wall
time, the JVM's heap and the tree's RSS, the state store's rows and memory; a run's means over batches 2 on.

--check instead: correctness at a small size. The prototype's windows (Redis db 1) against the current merge's
(WindowWriter over the same records, db 2), after the query's last batch ran twice (its commit removed from
the checkpoint, the query restarted): exit status 1 when they differ.

Last line: `state_store=<s> state_batch_cpu_s=<s> none_batch_cpu_s=<s> state_merge_cpu_s=<s>
current_merge_cpu_s=<s> merge_cpu_ratio=<x> state_driver_cpu_ms=<ms> driver_cpu_series_growth=<x>` at the
largest --series for the first store: a batch's CPU (all processes), the same without a merge, their
difference (the merge's cost here), the current merge's (merge_cpu: its thread and Redis), the ratio of the
two, and the driver's CPU a batch over the same at the smallest --series.
Usage: python bench/state_store_merge.py [--series 10000 100000] [--stores rocksdb none] [--batches 8]
[--period-ms 5000] [--max-offsets 200000] [--delay-ms 30000] [--merge-cpu] [--spark-conf K=V] [--check]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming import StreamingQuery

from aggregator.member_text import member_column
from aggregator.partition_partials import SPARK_SCHEMA, PartitionPartials, _narrow
from aggregator.query import RollupQuerySpec, _choose_checkpoint_manager, kafka_columns, kafka_source_options
from aggregator.raw_records import flat_table
from aggregator.resp_commands import execute_in_multi, packed
from aggregator.window_partials import one_array, window_partials, window_starts, with_schema
from aggregator.window_writer import WindowWriter
from bench.merge_cpu import batch_partials
from bench.process_cpu import CpuBudget
from bench.rollup_runs import bench_stack, in_child, produce, record, record_key
from bench.sampler import jvm_memory_probes
from contract import redis_layout as layout
from contract.records.raw_metrics import DERIVED_METRICS
from contract.replication_policy import metrics_topic
from tests.aggregator.streaming_input import snapshot

TARGET = "bench"
SIZES = tuple(layout.WINDOWS)  # a row's size: its index here
# The metrics the executors' partials carry (the sink derives the others, lag in seconds, from its history).
MERGED = tuple(m for m in layout.WINDOW_METRICS if m not in DERIVED_METRICS)
PARTS = ("n", "sum", "min", "max", "last")
SUBJECT = ("target", "source", "topic", "partition", "group")
KEYS = (*SUBJECT, "size", "wend")
LAST_KEY = pa.decimal128(38, 0)
STORES = {"rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
          "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}
# What withWatermark marks its column with (and window() its window): the grouping key carrying it is the
# one whose state the watermark evicts. Here that is the window's end, while the watermark itself follows
# the partials' own event time (a 1 h window's end would run it an hour ahead).
EVENT_TIME_METADATA = "spark.watermarkDelayMs"
KEYS_A_CALL = 200  # keys a Lua call writes
CALLS_A_MULTI = 50
WRITTEN = pa.schema([("pid", pa.int32()), ("windows", pa.int64()), ("keys", pa.int64()),
                     ("cpu_s", pa.float64()), ("bytes", pa.int64())])

# Per key in KEYS: its size's index, its number of windows, its newest start, then start and member of each
# window; ARGV[1..9]: per size its trim period, retention and lifetime. The key's newest start moves only
# forward (a late window rewritten does not move it back); a key is trimmed to its retention and given its
# lifetime when its newest start enters a new trim period, as the merge does (redis_scripts), reading its
# fields (HKEYS) where the merge knows them.
WRITE_WINDOWS_LUA = """
local period = {tonumber(ARGV[1]), tonumber(ARGV[4]), tonumber(ARGV[7])}
local retention = {tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[8])}
local lifetime = {ARGV[3], ARGV[6], ARGV[9]}
local pos = 10
for i = 1, #KEYS do
  local key, size = KEYS[i], tonumber(ARGV[pos]) + 1
  local fields, newest = tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2])
  local first, last = pos + 3, pos + 2 + 2 * fields
  local held = tonumber(redis.call('HGET', key, 'n'))
  if held == nil or held < newest then
    redis.call('HSET', key, 'n', ARGV[pos + 2], unpack(ARGV, first, last))
    if held == nil or math.floor(held / period[size]) < math.floor(newest / period[size]) then
      local cut, gone = newest - retention[size], {}
      for _, name in ipairs(redis.call('HKEYS', key)) do
        local start = tonumber(name)
        if name ~= 'n' and start ~= nil and start < cut then
          gone[#gone + 1] = name
        end
      end
      for j = 1, #gone, 1000 do
        redis.call('HDEL', key, unpack(gone, j, math.min(j + 999, #gone)))
      end
      redis.call('PEXPIRE', key, lifetime[size])
    end
  else
    redis.call('HSET', key, unpack(ARGV, first, last))
  end
  pos = last + 1
end
return #KEYS
"""
SIZE_ARGS = [str(v) for w in SIZES for v in (layout.trim_period_ms(w), layout.WINDOWS[w].retention_ms,
                                             layout.key_ttl_ms(w))]


def sized_schema() -> pa.Schema:
    fields = [pa.field(c, pa.string()) for c in ("target", "source", "topic")]
    fields += [pa.field("partition", pa.int32()), pa.field("group", pa.string()),
               pa.field("size", pa.int32()), pa.field("ts", pa.int64()), pa.field("wend", pa.int64())]
    for m in MERGED:
        fields += [pa.field(f"{m}__{p}", pa.float64()) for p in PARTS]
        fields += [pa.field(f"{m}__last_ts", pa.int64()), pa.field(f"{m}__key", LAST_KEY)]
    return pa.schema(fields)


SIZED = sized_schema()


@dataclass(frozen=True)
class SizedPartials:
    """The function mapInArrow runs in each task of the streaming plan: the task's records parsed and made
    into partial 10 s windows by the aggregator's own code, each row then once a window size."""

    target: str

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        chunks = [b for b in batches if b.num_rows]
        if not chunks:
            return
        flat = flat_table(_narrow(pa.Table.from_batches(chunks)), self.target)
        chunks.clear()
        yield from sized(with_schema(window_partials(flat))).to_batches(max_chunksize=65_536)


def sized(windows: pa.Table) -> pa.Table:
    """Partial 10 s windows (window_partials' columns) as rows of SIZED: each row at every size."""
    start10 = one_array(windows["window_start"])
    metrics: dict[str, pa.Array] = {}
    for m in MERGED:
        valid = pc.is_valid(windows[f"{m}__n"])
        metrics |= {f"{m}__{p}": one_array(windows[f"{m}__{p}"]) for p in PARTS}
        # A partial without last ts counts as of its window's start (batch_plan, merge_windows).
        last_ts = pc.if_else(valid, pc.coalesce(one_array(windows[f"{m}__last_ts"]), start10),
                             pa.scalar(None, pa.int64()))
        metrics[f"{m}__last_ts"] = last_ts
        metrics[f"{m}__key"] = last_key(last_ts, metrics[f"{m}__last"], valid)
    subject = {"target": windows["target"], "source": windows["source"], "topic": windows["topic"],
               "partition": windows["partition"], "group": windows["group"]}
    tables = []
    for i, name in enumerate(SIZES):
        size_ms = layout.WINDOWS[name].size_ms
        wend = pc.add(window_starts(start10, size_ms), size_ms)
        tables.append(pa.table({**subject, "size": pa.repeat(pa.scalar(i, pa.int32()), windows.num_rows),
                                "ts": start10, "wend": wend, **metrics}, schema=SIZED))
    return pa.concat_tables(tables)


def last_key(last_ts: pa.Array, last: pa.Array, valid: pa.Array) -> pa.Array:
    """(last ts, last) as one decimal ordered as the pair: last ts * 2^64 + last's float64 bits made
    unsigned-ordered (negatives' bits flipped, positives' sign bit set). Null where the metric is absent."""
    raw = pc.fill_null(last, 0.0).to_numpy(zero_copy_only=False).view(np.int64)
    ordered = np.where(raw < 0, ~raw, raw ^ np.int64(-(2**63))).view(np.uint64)
    words = np.empty((len(raw), 2), np.uint64)
    words[:, 0] = ordered
    words[:, 1] = pc.fill_null(last_ts, 0).to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    key = pa.Array.from_buffers(LAST_KEY, len(raw), [None, pa.py_buffer(words)])
    return pc.if_else(valid, key, pa.scalar(None, LAST_KEY))


def aggregates() -> list:
    out = []
    for m in MERGED:
        def column(part: str, m: str = m) -> Any:
            return F.col(f"{m}__{part}")
        out += [F.sum(column("n")).alias(f"{m}__n"), F.sum(column("sum")).alias(f"{m}__sum"),
                F.min(column("min")).alias(f"{m}__min"), F.max(column("max")).alias(f"{m}__max"),
                F.max_by(column("last"), column("key")).alias(f"{m}__last"),
                F.max(column("last_ts")).alias(f"{m}__last_ts")]
    return out


@dataclass(frozen=True)
class RedisWindows:
    """The function mapInArrow runs over a batch's updated windows (a task a state partition): writes them
    to Redis whole and answers one row (WRITTEN)."""

    redis_url: str
    db: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        began = time.thread_time()
        chunks = list(batches)
        windows = keys = sent = 0
        if chunks and any(c.num_rows for c in chunks):
            client = redis.Redis.from_url(self.redis_url, db=self.db)
            windows, keys, sent = write_windows(client, pa.Table.from_batches(chunks))
        answer = {"pid": os.getpid(), "windows": windows, "keys": keys, "cpu_s": time.thread_time() - began,
                  "bytes": sent}
        yield pa.RecordBatch.from_pylist([answer], schema=WRITTEN)


def write_windows(client: redis.Redis, table: pa.Table) -> tuple[int, int, int]:
    """Writes the windows of `table` (a row a subject, size and window: the aggregation's columns); returns
    (windows, keys, bytes sent)."""
    size = one_array(table["size"]).to_numpy(zero_copy_only=False).astype(np.int64)
    size_ms = np.array([w.size_ms for w in layout.WINDOWS.values()], np.int64)[size]
    wend = one_array(table["wend"])  # Spark's timestamp (microseconds)
    if pa.types.is_timestamp(wend.type):
        wend = wend.cast(pa.timestamp("ms", wend.type.tz))
    start = pc.cast(wend, pa.int64()).to_numpy(zero_copy_only=False) - size_ms
    rows = np.arange(table.num_rows)
    narrow = []
    for m in MERGED:
        valid = pc.is_valid(table[f"{m}__n"]).to_numpy(zero_copy_only=False)
        if valid.any():
            narrow.append(pa.table({
                "series": rows[valid], "metric": np.full(int(valid.sum()), layout.METRIC_INDEX[m], np.int64),
                "start": start[valid],
                **{p: one_array(table[f"{m}__{p}"]).filter(pa.array(valid)) for p in PARTS},
                "last_ts": one_array(table[f"{m}__last_ts"]).filter(pa.array(valid))}))
    if not narrow:
        return 0, 0, 0
    members = member_column(pa.concat_tables(narrow))  # a row a window: series (the table's row), start
    names = key_names(table)
    window_rows = members["series"].to_numpy()
    ordered = pa.table({"key": names.take(pa.array(window_rows)), "start": members["start"],
                        "member": members["member"], "size": size[window_rows]}) \
        .sort_by([("key", "ascending"), ("start", "ascending")])
    key = one_array(ordered["key"])
    changes = pc.not_equal(key.slice(1), key.slice(0, len(key) - 1)).to_numpy(zero_copy_only=False)
    firsts = np.flatnonzero(np.concatenate([[True], changes]))
    counts = np.diff(np.append(firsts, len(key)))
    lasts = firsts + counts - 1
    starts = one_array(ordered["start"])
    args, arg_counts = script_calls(
        key.take(pa.array(firsts)), ordered["size"].to_numpy()[firsts], counts,
        starts.take(pa.array(lasts)), pc.cast(starts, pa.string()), one_array(ordered["member"]),
        str(client.script_load(WRITE_WINDOWS_LUA)))
    sent, at = 0, 0
    for c in range(0, len(arg_counts), CALLS_A_MULTI):
        part = arg_counts[c:c + CALLS_A_MULTI]
        commands = packed(args.slice(at, int(part.sum())), part)
        execute_in_multi(client, commands, len(part))
        at += int(part.sum())
        sent += commands.size
    return len(key), len(firsts), sent


def key_names(table: pa.Table) -> pa.Array:
    """Each row's key (redis_layout.series_key of its subject at its size), by Arrow: each column's distinct
    values escaped once (the layout's own escaping)."""
    tag = pc.binary_join_element_wise("{", _escaped(table["target"]), "|", _escaped(table["source"]), "|",
                                      _escaped(table["topic"]), "}", "")
    partition = pc.cast(one_array(table["partition"]), pa.string())
    window = pa.array(SIZES).take(one_array(table["size"]))
    names = pc.binary_join_element_wise(f"{layout.PREFIX}:wh:", tag, ":", partition, ":",
                                        _escaped(table["group"]), ":", window, "")
    first = {c: table[c][0].as_py() for c in (*SUBJECT, "size")}
    expected = layout.series_key(layout.SeriesId(first["target"], first["source"], first["topic"],
                                                 first["partition"], "", first["group"] or None),
                                 SIZES[first["size"]])
    if names[0].as_py() != expected:
        raise AssertionError(f"key {names[0].as_py()!r} is not the layout's {expected!r}")
    return names


def _escaped(column: pa.ChunkedArray) -> pa.Array:
    encoded = pc.dictionary_encode(pc.fill_null(one_array(column), ""))
    texts = pa.array([layout._part(v) for v in encoded.dictionary.to_pylist()], pa.string())
    return texts.take(encoded.indices)


def script_calls(names: pa.Array, sizes: np.ndarray, counts: np.ndarray, newest: pa.Array, fields: pa.Array,
                 members: pa.Array, sha: str) -> tuple[pa.Array, np.ndarray]:
    """The EVALSHA calls writing each key's windows (`names[k]`: size `sizes[k]`, `counts[k]` windows, the
    k-th run of `fields` and `members`), KEYS_A_CALL keys a call: every call's arguments in one array, and
    each call's number of them."""
    keys = len(names)
    call = np.arange(keys) // KEYS_A_CALL
    calls = int(call[-1]) + 1
    keys_in = np.bincount(call, minlength=calls)
    rows_in = np.bincount(call, weights=counts, minlength=calls).astype(np.int64)
    lengths = 3 + keys_in + len(SIZE_ARGS) + 3 * keys_in + 2 * rows_in
    call_at = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    local = np.arange(keys) - call * KEYS_A_CALL
    before = np.concatenate([[0], np.cumsum(counts)[:-1]])  # windows before a key's, all calls
    before_in_call = before - before[call * KEYS_A_CALL]
    key_at = call_at[call] + 3 + keys_in[call] + len(SIZE_ARGS) + 3 * local + 2 * before_in_call
    row_key = np.repeat(np.arange(keys), counts)
    row_at = key_at[row_key] + 3 + 2 * (np.arange(len(fields)) - before[row_key])
    heads = pc.take(pa.concat_arrays([pa.array(["EVALSHA", sha]), pc.cast(pa.array(keys_in), pa.string())]),
                    pa.array(np.stack([np.zeros(calls, np.int64), np.ones(calls, np.int64),
                                       2 + np.arange(calls)], axis=1).reshape(-1)))
    sources = [heads, names, pa.array(SIZE_ARGS * calls, pa.string()), pc.cast(pa.array(sizes), pa.string()),
               pc.cast(pa.array(counts), pa.string()), pc.cast(newest, pa.string()), fields, members]
    places = [(call_at[:, None] + np.arange(3)).reshape(-1), call_at[call] + 3 + local,
              (call_at[:, None] + 3 + keys_in[:, None] + np.arange(len(SIZE_ARGS))).reshape(-1),
              key_at, key_at + 1, key_at + 2, row_at, row_at + 1]
    order = np.empty(int(lengths.sum()), np.int64)
    order[np.concatenate(places)] = np.arange(len(order))
    return pc.take(pa.concat_arrays(sources), pa.array(order)), lengths


@dataclass
class BatchMarks:
    """The CPU of each part (CpuBudget's) and Redis's, at each foreachBatch's start and end, and what the
    writer tasks answered."""

    budget: CpuBudget
    memory: Callable[[], dict[str, float]]  # MB by part (RSS) and the JVM's heap, at each batch's end
    marks: dict[int, list[tuple[float, dict[str, float]]]] = field(default_factory=dict)
    memory_at_end: dict[int, dict[str, float]] = field(default_factory=dict)
    written: dict[int, list[dict]] = field(default_factory=dict)
    sampling_s: float = 0.0  # the driver's CPU spent sampling, left out of its figure

    def mark(self, batch_id: int) -> None:
        began = time.thread_time()
        self.budget.sample()
        totals = dict(self.budget.samples[-1][1])
        if len(self.marks.get(batch_id, [])) == 1:  # the batch's end
            self.memory_at_end[batch_id] = self.memory()
        self.sampling_s += time.thread_time() - began
        totals["driver"] = totals.get("driver", 0.0) - self.sampling_s
        self.marks.setdefault(batch_id, []).append((time.monotonic(), totals))


def merge_query(spark: SparkSession, stack: Any, source: str, store: str, checkpoint: Path, db: int,
                args: argparse.Namespace, marks: BatchMarks) -> StreamingQuery:
    spec = RollupQuerySpec(target=TARGET, bootstrap_servers=stack.bootstrap, redis_url=stack.redis_url,
                           checkpoint_dir=str(checkpoint), max_offsets_per_trigger=args.max_offsets,
                           topics_pattern=metrics_topic(source).replace(".", r"\."))
    rows = kafka_columns(spark.readStream.format("kafka").options(**kafka_source_options(spec)).load())
    _choose_checkpoint_manager(spark, spec.checkpoint_dir)
    if store == "none":
        stream: DataFrame = rows

        def sink(frame: DataFrame, batch_id: int) -> None:
            marks.mark(batch_id)
            frame.mapInArrow(PartitionPartials(TARGET, None, None), SPARK_SCHEMA).toArrow()
            marks.mark(batch_id)
    else:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", STORES[store])
        spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        parts = rows.mapInArrow(SizedPartials(TARGET), from_arrow_schema(SIZED)) \
            .withColumn("ts", F.timestamp_millis("ts")).withWatermark("ts", f"{args.delay_ms} milliseconds")
        parts = parts.withColumn("wend", F.timestamp_millis("wend").alias(
            "wend", metadata={EVENT_TIME_METADATA: args.delay_ms}))
        stream = parts.groupBy(*KEYS).agg(*aggregates())
        writer = RedisWindows(stack.redis_url, db)

        def sink(frame: DataFrame, batch_id: int) -> None:
            marks.mark(batch_id)
            answers = frame.mapInArrow(writer, from_arrow_schema(WRITTEN)).toArrow()
            marks.written.setdefault(batch_id, []).extend(answers.to_pylist())
            marks.mark(batch_id)
    mode = "append" if store == "none" else "update"
    return (stream.writeStream.queryName(f"merge_{source}").outputMode(mode)
            .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds")
            .foreachBatch(sink).start())


def produce_reports(bootstrap: str, source: str, series: int, periods: int, period_ms: int,
                    base: int) -> None:
    """S series x P reports, `period_ms` of event time apart from `base`: the records merge_cpu.batch_partials
    makes for the same shape (seq = the period)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4"})
    keys = [record_key(source, s) for s in range(series)]
    for p in range(periods):
        produce(producer, metrics_topic(source),
                [(keys[s], record(source, s, base + p * period_ms, p)) for s in range(series)])
    if producer.flush(120):
        raise RuntimeError("the reports were not all produced in 120 s")


@dataclass
class Run:
    name: str
    series: int
    store: str
    source: str
    batches: list[dict] = field(default_factory=list)  # a line's figures a batch

    def mean(self, figure: str) -> float:
        steady = self.batches[2:] or self.batches
        return statistics.mean(b[figure] for b in steady) if steady else float("nan")


def run_merge(stack: Any, series: int, store: str, args: argparse.Namespace, db: int = 0,
              base: int | None = None, replay: bool = False) -> Run:
    """Produces --batches batches of reports of `series` series and drains them with the prototype (or, store
    none, the aggregator's tasks alone); prints a line a batch."""
    spark, source = stack.spark, f"sm{store}{series}x{int(time.time()) % 100_000}"
    periods = args.batches * args.max_offsets // series
    base = base or int(time.time() * 1000) // 10_000 * 10_000 - periods * args.period_ms
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})  # kept: its handle ends with it
    admin.create_topics([NewTopic(metrics_topic(source), 2, 1)])[metrics_topic(source)].result(30)
    in_child(produce_reports, stack.bootstrap, source, series, periods, args.period_ms, base)
    probes = jvm_memory_probes(spark.sparkContext._jvm)

    def memory() -> dict[str, float]:
        heap = {k[4:]: probe() for k, probe in probes.items() if k.startswith("JVM heap")}
        return {**stack.sampler.sample(), **heap}

    marks = BatchMarks(CpuBudget(), memory)
    checkpoint = stack.work / f"checkpoint-{source}"
    name = f"{store} {series}"
    stack.sampler.run(name)
    query = merge_query(spark, stack, source, store, checkpoint, db, args, marks)
    try:
        query.processAllAvailable()
        if args.explain:
            query.explain()
        progress = {int(p["batchId"]): p for p in query.recentProgress if p["numInputRows"] > 0}
    finally:
        query.stop()
    if replay:
        # The last batch with records is run again: its commit goes, and so do the batches after it (a batch
        # without records that only moved the watermark), their offsets too, as if the process had died
        # between the last batch's writes and its commit.
        last = max(progress)
        commits = sorted(f.name for f in (checkpoint / "commits").iterdir())
        newest = max(int(n) for n in commits if n.isdigit())
        removed = [f"{log}/{name_}" for batch in range(last, newest + 1)
                   for log in (("commits",) if batch == last else ("commits", "offsets"))
                   for name_ in (str(batch), f".{batch}.crc") if (checkpoint / log / name_).exists()]
        for path in removed:
            (checkpoint / path).unlink()
        query = merge_query(spark, stack, source, store, checkpoint, db, args, marks)
        try:
            query.processAllAvailable()
            replayed = [(int(p["batchId"]), p["numInputRows"]) for p in query.recentProgress]
        finally:
            query.stop()
        print(f"{name}: commits {commits}, removed {removed}; the restarted query's batches (id, records) "
              f"{replayed}; foreachBatch calls for batch {last}: {len(marks.marks[last]) // 2}, writer "
              f"answers {len(marks.written.get(last, []))}")
    run = Run(name, series, store, source)
    state_dir = checkpoint / "state"
    for batch_id in sorted(progress):
        run.batches.append(batch_line(name, batch_id, progress[batch_id], marks))
    state_mb = sum(f.stat().st_size for f in state_dir.rglob("*") if f.is_file()) / 1e6
    print(f"{name}: state on disk at the end {state_mb:.0f} MB (checkpoint {checkpoint})")
    print(f"{name}: means over batches 2 on: CPU s total {run.mean('total'):.2f} (JVM {run.mean('jvm'):.2f}, "
          f"workers {run.mean('workers'):.2f} of which writing {run.mean('writer'):.2f}, driver "
          f"{run.mean('driver'):.3f}, Redis {run.mean('redis'):.2f}), wall {run.mean('wall'):.2f} s"
          + (f"; state rows {run.mean('state_rows'):.0f}, {run.mean('state_mb'):.0f} MB"
             if store != "none" else ""), flush=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return run


def batch_line(name: str, batch_id: int, progress: Any, marks: BatchMarks) -> dict:
    """A batch's figures (printed): its CPU by part from its foreachBatch's start to the next one's (the
    last batch: to its end)."""
    # A batch's foreachBatch marks its start and end (twice each for a batch run again).
    began = marks.marks[batch_id][0]
    ended = marks.marks[batch_id + 1][0] if batch_id + 1 in marks.marks else marks.marks[batch_id][1]
    used = {part: ended[1].get(part, 0.0) - began[1].get(part, 0.0) for part in ended[1]}
    written = marks.written.get(batch_id, [])
    figures = {"wall": ended[0] - began[0], "jvm": used.get("spark JVM", 0.0),
               "tasks": used.get("spark JVM: executor tasks", 0.0),
               "query": used.get("spark JVM: streaming query", 0.0), "gc": used.get("spark JVM: GC", 0.0),
               "workers": used.get("python workers", 0.0),
               "driver": used.get("driver", 0.0), "redis": used.get("redis", 0.0),
               "broker": used.get("kafka broker", 0.0), "writer": sum(w["cpu_s"] for w in written)}
    figures["total"] = sum(figures[p] for p in ("jvm", "workers", "driver", "redis"))
    state = ""
    operators = progress["stateOperators"] or []
    if operators:
        op = operators[0]
        figures["state_rows"], figures["state_mb"] = op["numRowsTotal"], op["memoryUsedBytes"] / 1e6
        custom = {k: v for k, v in (op["customMetrics"] or {}).items()
                  if re.search(r"SstFileSize|BytesWritten|rocksdbCommit|Memory", k)}
        state = (f"; state rows {op['numRowsTotal']}, updated {op['numRowsUpdated']}, removed "
                 f"{op['numRowsRemoved']}, dropped late {op['numRowsDroppedByWatermark']}, memory "
                 f"{op['memoryUsedBytes'] / 1e6:.0f} MB" + (f" {custom}" if custom else ""))
    print(f"{name} batch {batch_id}: {progress['numInputRows']} records, "
          f"{sum(w['windows'] for w in written)} windows to {sum(w['keys'] for w in written)} keys "
          f"({sum(w['bytes'] for w in written) / 1e6:.0f} MB); wall {figures['wall']:.2f} s; CPU s total "
          f"{figures['total']:.2f}: JVM {figures['jvm']:.2f} (tasks {figures['tasks']:.2f}, the query's "
          f"thread {figures['query']:.2f}, GC {figures['gc']:.2f}), workers "
          f"{figures['workers']:.2f} (writing {figures['writer']:.2f}), driver {figures['driver']:.3f}, "
          f"Redis {figures['redis']:.2f}, broker {figures['broker']:.2f}; MB at its end: "
          + ", ".join(f"{part} {mb:.0f}" for part, mb in marks.memory_at_end.get(batch_id, {}).items())
          + state, flush=True)
    return figures


def current_merge(series: int, args: argparse.Namespace) -> tuple[float, float]:
    """bench/merge_cpu.py at the same shape, in its own process: (its merge's CPU a batch, Redis's)."""
    command = [sys.executable, str(Path(__file__).with_name("merge_cpu.py")), "--series", str(series),
               "--batches", str(args.batches), "--periods", str(args.max_offsets // series),
               "--period-ms", str(args.period_ms), "--coarse-every", "3"]
    print(f"current merge: {' '.join(command[1:])}", flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout, end="", flush=True)
    if done.returncode:
        print(f"current merge failed ({done.returncode}): {done.stderr[-2000:]}", flush=True)
        return float("nan"), float("nan")
    out = done.stdout
    last = dict(pair.split("=") for pair in out.strip().splitlines()[-1].split())
    return float(last["merge_python_cpu_s"]), float(last["merge_redis_cpu_s"])


def check(stack: Any, args: argparse.Namespace) -> bool:
    """The prototype's windows (db 1, its last batch replayed) against the current merge's (db 2) on the
    same records: equal?"""
    series, store = args.series[0], args.stores[0]
    periods_a_batch = args.max_offsets // series
    base = int(time.time() * 1000) // 10_000 * 10_000 - args.batches * periods_a_batch * args.period_ms
    source = run_merge(stack, series, store, args, db=1, base=base, replay=True).source
    oracle = redis.Redis.from_url(stack.redis_url, db=2)
    writer = WindowWriter(oracle, "oracle")
    partitions = [zlib.crc32(record_key(source, s)) % 2 for s in range(series)]
    now = int(time.time() * 1000)
    for b in range(args.batches):
        windows = batch_partials(series, partitions, b, periods_a_batch, base, now, args.period_ms,
                                 source=source)
        writer.apply_all([(b, windows)], every_size=True)
    mine = snapshot(redis.Redis.from_url(stack.redis_url, db=1), match="srm:wh:*")
    theirs = snapshot(oracle, match="srm:wh:*")
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    print(f"check ({store}, {series} series, {args.batches} batches, the last replayed): {len(mine)} entries "
          f"here, {len(theirs)} in the current merge's; {len(differ)} differ")
    for k in differ[:5]:
        print(f"  {k}: here {mine.get(k)!r}\n  {' ' * len(k)}  merge {theirs.get(k)!r}")
    return not differ and len(mine) > 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--stores", nargs="+", choices=[*STORES, "none"], default=["rocksdb", "none"])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--period-ms", type=int, default=5000)
    parser.add_argument("--max-offsets", type=int, default=200_000)
    parser.add_argument("--delay-ms", type=int, default=30_000, help="the watermark's delay (state kept)")
    parser.add_argument("--merge-cpu", action="store_true", help="run bench/merge_cpu.py at each shape first")
    parser.add_argument("--check", action="store_true", help="correctness at a small size instead")
    parser.add_argument("--explain", action="store_true", help="print each query's physical plan")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    with bench_stack(args.spark_conf) as stack:
        if args.check:
            ok = check(stack, args)
            stack.tree_peak_mb()
            raise SystemExit(0 if ok else 1)
        runs: dict[tuple[str, int], Run] = {}
        merges: dict[int, tuple[float, float]] = {}
        for series in args.series:
            if args.merge_cpu:
                merges[series] = current_merge(series, args)
            for store in args.stores:
                if store != "none" or series == max(args.series):  # the merge's baseline, at the largest
                    runs[(store, series)] = run_merge(stack, series, store, args)
        stack.tree_peak_mb()
    small, large, store = min(args.series), max(args.series), args.stores[0]
    state = runs[(store, large)]
    growth = state.mean("driver") / runs[(store, small)].mean("driver") if small != large else float("nan")
    none = runs[("none", large)].mean("total") if ("none", large) in runs else float("nan")
    current = sum(merges.get(large, (float("nan"), float("nan"))))
    print(f"state_store={store} state_batch_cpu_s={state.mean('total'):.2f} none_batch_cpu_s={none:.2f} "
          f"state_merge_cpu_s={state.mean('total') - none:.2f} current_merge_cpu_s={current:.2f} "
          f"merge_cpu_ratio={(state.mean('total') - none) / current:.2f} "
          f"state_driver_cpu_ms={state.mean('driver') * 1000:.0f} driver_cpu_series_growth={growth:.2f}")


if __name__ == "__main__":
    main()
