"""The merge of a Kafka partition's windows in its task (issue 38), a prototype measured at the real shape:
each Kafka partition's task merges its own subjects' partial windows into the stored 10 s / 1 min / 1 h
windows, with the merge's state kept a blob a Kafka partition in Redis, against the sink's merge thread as
today, batch by batch (A B, B A, ...) in one process, with two real redis-servers (one a side), no Spark.

Today (A): the sink stages a batch's partials and its merge thread merges them (window_writer.WindowWriter:
stored_windows' Arrow copy of every series' recent windows, kept in the driver from batch to batch).

The prototype (B): raw metrics are keyed by subject, so a partition's and a group's windows (level `p`, and an
invalid record's, whose subject is the raw topic's partition) are one task's alone. Each task runs the
product's merge (a WindowWriter's own pieces: numbered_partials, size_partials, StoredWindows.uncovered /
load / apply, calls_by_part, send_part) over its own rows, on a state it reads and writes back each batch:
- the state is one Redis string a Kafka partition (keyed by the raw topic's partition count too: a topic
  given more partitions moves subjects between tasks): LZ4'd Arrow IPC streams of what the WindowWriter keeps
  (StoredWindows' kept windows, held starts and covered-from at each size; SeriesKeys' subjects, key names
  and hash tags, numbered in the task; the numbered partials of the batches merged at the finest size only
  since the last merge at every size), read with one GET and written with one SET;
- exactly once by the Kafka offsets: the state carries the next offset after the last record merged, and is
  written in the same MULTI as the windows (the task's calls packed by Arrow, then the SET), WATCHing the
  state key. A task whose records all lie below that offset finds its batch applied and writes nothing; a
  range straddling it (not what Spark replays, which is the same range) merges only the records from it on;
  a second attempt running at once loses the WATCH and then finds the first's offset. With --parts N the
  windows go in N MULTIs (by hash tag, as the merge thread cuts its merges), each recording in a small hash
  the parts done and the offset the merge goes to, the state's SET in the last: a cut-off attempt's retry
  skips the parts done;
- whole-topic and replication rows (levels `t`, `r`), which several tasks share, stay the driver's: a
  WindowWriter in this thread merges them, its figure given apart.
Both sides merge the 1 min / 1 h windows at the same batches (every --coarse-every-th and the last; the
driver decides a batch's and hands it to the tasks with the watermark), and each side's 10 s windows at every
batch.

Per batch, thread CPU of each stage: A's merge (the thread's), B's tasks (state read: GET, decode, restore;
merge; state encode; write: the MULTI), B's driver (shared rows); Redis's CPU (INFO) and bytes in and out of
Redis during each; each task's state (rows, bytes as Arrow, bytes LZ4'd) and RSS rise (PeakRss). The partials
(what the tasks compute today) are made once a batch, outside every figure.
Last line: `tasks_merge_cpu_s=<s> tasks_state_cpu_s=<s> driver_shared_cpu_s=<s> thread_merge_cpu_s=<s>
ratio=<B / A> ...`, the means over batches 1 on (batch 0 merges into an empty Redis on both sides).
--check compares the two Redis (a digest of every window hash) after every batch, replays a task whose
batch was applied (batch 3), runs an attempt cut off before its EXEC and then the task again (batch 4),
merges a task's records in two ranges, the second straddling the first's offset (batch 5; with --values
regular only: merging a batch's windows in two steps adds non-integer sums in another order, which rounds
differently, as today's merge of batches grouped otherwise does), drops a task's state after a merge at every
size (the task starts over from Redis: batch 7), with --parts above 1 cuts an attempt off after its first
part's EXEC (batch 2: the task then resumes, its parts done skipped, its kept windows read from Redis at the
next batch), and exits 1 on a difference.
--restart-at B drops every task's state before batch B (its figure apart: the cold read).
Usage: python bench/task_merge_cpu.py [--series 100000] [--batches 7] [--records 200000]
[--period-ms 5000] [--coarse-every 3] [--kafka-partitions 2] [--compression lz4|zstd|none]
[--values regular|live] [--parts 1] [--restart-at B] [--check] [--digest]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import statistics
import struct
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.long_lived import return_freed_memory
from aggregator.partition_partials import PARTS_SCHEMA, PartitionPartials, collect
from aggregator.raw_records import flat_table, on_time
from aggregator.stored_windows import SeriesKeys, StoredWindows
from aggregator.window_partials import window_partials, with_schema
from aggregator.window_writer import WindowWriter
from bench.process_cpu import PeakRss, StageClock, redis_cpu_s, redis_net_bytes
from bench.rollup_runs import record, record_key
from contract import redis_layout as layout
from contract.replication_policy import metrics_topic
from stack.redis_server import RedisServer

SOURCE = "tput"
TOPIC = metrics_topic(SOURCE)
MAGIC = b"SRMTM1"
SIZES = list(layout.WINDOWS)


def state_key(target: str, kafka_topic: str, kafka_partition: int, kafka_partitions: int) -> str:
    """A Kafka partition's merge state: keyed by the partition count too (a count change moves subjects)."""
    return f"srm:taskmerge:{target}:{kafka_topic}:{kafka_partition}/{kafka_partitions}"


# --- the task's state ---------------------------------------------------------------------------------------

@dataclass
class TaskState:
    """What a WindowWriter keeps between merges, for one Kafka partition's own subjects, and up to where."""

    through: int = -1  # the next Kafka offset after the last record merged; -1: none merged
    batch: int = -1  # the last batch merged (diagnostics: the offsets decide)
    runs: int = 0  # merges done: the finest-only batches are numbered by them (WindowWriter._coarse's ranges)
    applied: int = -1  # the last run merged at every size
    stored: StoredWindows = field(default_factory=StoredWindows)
    keys: SeriesKeys = field(default_factory=SeriesKeys)
    behind: list[tuple[int, int, pa.Table | None]] = field(default_factory=list)

    def encode(self, compression: str | None) -> tuple[bytes, int, int]:
        """(The blob, its tables' Arrow bytes, their rows)."""
        segments: dict[str, pa.Table] = {}
        for w in SIZES:
            if w in self.stored.tables:
                segments[f"windows:{w}"] = self.stored.tables[w]
            if w in self.stored.starts:
                segments[f"starts:{w}"] = self.stored.starts[w]
            if w in self.stored.covered_from:
                segments[f"covered:{w}"] = pa.table({"from": self.stored.covered_from[w]})
        k = self.keys
        tag_keys = sorted(k.tag_ids.items(), key=lambda item: item[1])
        segments["keys"] = pa.table({"tag": pa.array(k.tags, pa.int64())})
        segments["names"] = pa.table({"name": k.names()})
        segments["texts"] = pa.table({"text": k._texts, "number": k._text_numbers})
        segments["tags"] = pa.table({**{c: pa.array([t[0][i] for t in tag_keys], pa.string())
                                        for i, c in enumerate(("target", "source", "topic"))},
                                     "crc": pa.array(k.tag_crcs, pa.int64())})
        for i, (_, _, table) in enumerate(self.behind):
            if table is not None:
                segments[f"behind:{i}"] = table
        head = {"through": self.through, "batch": self.batch, "runs": self.runs, "applied": self.applied,
                "behind": [[first, last, table is not None] for first, last, table in self.behind],
                "segments": list(segments)}
        out = io.BytesIO()
        out.write(MAGIC)
        _framed(out, json.dumps(head).encode())
        options = pa.ipc.IpcWriteOptions(compression=compression)
        nbytes = rows = 0
        for table in segments.values():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
                writer.write_table(table)
            _framed(out, sink.getvalue().to_pybytes())
            nbytes += table.nbytes
            rows += table.num_rows
        return out.getvalue(), nbytes, rows

    @classmethod
    def decode(cls, raw: bytes | None) -> TaskState:
        if raw is None:
            return cls()
        view = memoryview(raw)
        if bytes(view[:len(MAGIC)]) != MAGIC:
            raise ValueError("not a task merge state")
        at = len(MAGIC)
        head_bytes, at = _unframed(view, at)
        head = json.loads(bytes(head_bytes))
        tables = {}
        for name in head["segments"]:
            blob, at = _unframed(view, at)
            tables[name] = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
        state = cls(head["through"], head["batch"], head["runs"], head["applied"])
        for w in SIZES:
            if f"windows:{w}" in tables:
                state.stored.tables[w] = tables[f"windows:{w}"].combine_chunks()
            if f"starts:{w}" in tables:
                state.stored.starts[w] = tables[f"starts:{w}"].combine_chunks()
            if f"covered:{w}" in tables:
                state.stored.covered_from[w] = tables[f"covered:{w}"]["from"].to_numpy().copy()
        state.keys = _series_keys(tables)
        state.behind = [(first, last, tables[f"behind:{i}"] if held else None)
                        for i, (first, last, held) in enumerate(head["behind"])]
        return state


def _framed(out: io.BytesIO, blob: bytes) -> None:
    out.write(struct.pack("<Q", len(blob)))
    out.write(blob)


def _unframed(view: memoryview, at: int) -> tuple[memoryview, int]:
    (n,) = struct.unpack_from("<Q", view, at)
    return view[at + 8:at + 8 + n], at + 8 + n


def _series_keys(tables: dict[str, pa.Table]) -> SeriesKeys:
    """A SeriesKeys as it was encoded: no Python call a subject (its `ids` stay empty: number() is asked only
    of subjects number_columns did not find in the texts, new ones)."""
    keys = SeriesKeys()
    names = tables["names"]["name"].combine_chunks()
    flat = names.to_pylist()
    width = len(SIZES)
    keys.keys = list(zip(*(flat[i::width] for i in range(width)), strict=True))
    keys.tags = tables["keys"]["tag"].to_pylist()
    tags = tables["tags"]
    named = zip(*(tags[c].to_pylist() for c in ("target", "source", "topic")), strict=True)
    keys.tag_ids = dict(zip(named, range(tags.num_rows), strict=True))
    keys.tag_crcs = tags["crc"].to_pylist()
    keys._names = names
    keys._texts = tables["texts"]["text"].combine_chunks()
    keys._text_numbers = tables["texts"]["number"].to_numpy().copy()
    return keys


# --- a task ------------------------------------------------------------------------------------------------

@dataclass
class TaskCost:
    stages: dict[str, float] = field(default_factory=dict)
    outcome: str = "merged"
    state_bytes: int = 0  # the blob written (LZ4'd)
    state_arrow: int = 0  # its tables' Arrow bytes
    state_rows: int = 0
    read_bytes: int = 0
    subjects: int = 0
    write_wall: float = 0.0  # the MULTI sent to its answer: how long Redis runs it whole, at most


class CutOff(Exception):
    """An attempt ended before its EXEC (--check)."""


def own_windows(kafka: pa.Table, now: int) -> pa.Table:
    """A task's partial windows of its own subjects (level p), as PartitionPartials makes them."""
    flat = on_time(flat_table(kafka, "bench", now + 10**7), None)
    windows = with_schema(window_partials(flat))
    return windows.filter(pc.equal(windows["level"], "p"))


def merge_task(client: redis.Redis, key: str, kafka: pa.Table, windows: pa.Table, batch: int,
               every_size: bool, now: int, compression: str | None, cut_off: bool = False, parts: int = 1,
               cut_after: int | None = None) -> TaskCost:
    """One task's merge of its own subjects' windows (`windows`: own_windows of `kafka`, what the task has in
    hand): state read, merge, state encoded, then its windows in `parts` MULTIs (the merge thread's cut, by
    hash tag), the state's SET in the last. Retried when a concurrent attempt wrote first (it then finds its
    records applied, or its parts done). `cut_off`: the attempt ends before its first EXEC; `cut_after`: after
    that many parts' EXECs."""
    for _ in range(3):
        try:
            return _merge_task(client, key, kafka, windows, batch, every_size, now, compression, cut_off,
                               parts, cut_after)
        except redis.WatchError:
            continue
    raise RuntimeError(f"{key}: the state kept changing")


def progress_key(key: str) -> str:
    """The parts of a task's merge already in Redis (a merge cut in parts), and the offset range's end."""
    return f"{key}:merging"


def _merge_task(client: redis.Redis, key: str, kafka: pa.Table, windows: pa.Table, batch: int,
                every_size: bool, now: int, compression: str | None, cut_off: bool, part_count: int,
                cut_after: int | None) -> TaskCost:
    cost = TaskCost()
    stage = StageClock(cost.stages)
    progress = progress_key(key)
    with client.pipeline(transaction=True) as pipe:
        pipe.watch(key, progress)
        raw = cast(bytes | None, pipe.get(key))
        merging = cast(dict, pipe.hgetall(progress))
        cost.read_bytes = len(raw) if raw else 0
        state = TaskState.decode(raw)
        writer = WindowWriter(client, key)
        writer.stored, writer.series_keys, writer._finest_only = state.stored, state.keys, state.behind
        stage("read")
        offsets = kafka["offset"].to_numpy()
        if len(offsets) and int(offsets.max()) < state.through:
            cost.outcome = "applied already"
            pipe.reset()
            return cost
        if len(offsets) and int(offsets.min()) < state.through:
            cost.outcome = f"from offset {state.through}"
            kafka = kafka.filter(pc.greater_equal(kafka["offset"], state.through))
            windows = own_windows(kafka, now)  # the task's partials of those (today's work, not the merge's)
            stage.restart()
        through = max(state.through, int(offsets.max()) + 1) if len(offsets) else state.through
        done = _parts_done(merging, through)
        fresh, cost.subjects = writer.number(windows, writer.series_keys) if windows.num_rows else (None, 0)
        run = state.runs
        finest = state.behind[-1][1] if state.behind else state.applied
        coarse = writer._coarse(pipe, state.applied, finest, fresh) if every_size else None
        updates = writer._updates(writer._sized(fresh, coarse))
        parts = list(writer.parts(updates, writer.series_keys, part_count, sorted(done)))
        stage("merge")
        if done:
            # Resuming: windows read from Redis for the parts done hold the batch already, so the kept copy
            # may count it twice there: the next batch reads its windows from Redis (a cut between parts).
            cost.outcome = f"resumed after parts {sorted(done)}"
            state.stored = StoredWindows()
        state.runs = run + 1
        state.batch = batch
        state.through = through
        if every_size:
            state.applied, state.behind = run, []
        else:
            state.behind = [*state.behind, (run, run, fresh)]
        blob, cost.state_arrow, cost.state_rows = state.encode(compression)
        cost.state_bytes = len(blob)
        stage("encode")
        if cut_off:
            pipe.reset()
            raise CutOff(key)
        for i, (part, calls) in enumerate(parts):
            last = i == len(parts) - 1
            done.add(part)
            then = [("SET", key, blob), ("DEL", progress)] if last else \
                [("HSET", progress, "through", through, "parts", ",".join(map(str, sorted(done))))]
            sent = time.monotonic()
            writer.send_part(pipe, calls, then)  # EXEC'd: WATCH is over
            cost.write_wall = max(cost.write_wall, time.monotonic() - sent)
            if cut_after is not None and i + 1 >= cut_after and not last:
                raise CutOff(key)
            if not last:  # another attempt's part or state since aborts the next part
                pipe.watch(key, progress)
                if _parts_done(cast(dict, pipe.hgetall(progress)), through) != done:
                    raise redis.WatchError(f"{key}: another attempt merged meanwhile")
        if not parts:
            pipe.multi()
            pipe.set(key, blob)
            pipe.delete(progress)
            pipe.execute()
        stage("write")
    return cost


def _parts_done(merging: dict, through: int) -> set[int]:
    """The parts of the merge up to offset `through` already in Redis; a merge of another range cut off
    part-way cannot be finished here (its records are not this task's): Spark replays a batch's own range."""
    if not merging:
        return set()
    fields = {k.decode(): v.decode() for k, v in merging.items()}
    if int(fields["through"]) != through:
        raise RuntimeError(f"a merge up to offset {fields['through']} was cut off part-way; this task's "
                           f"records end at {through}")
    return {int(p) for p in fields["parts"].split(",") if p}


# --- the records -------------------------------------------------------------------------------------------

LIVE = ('{"v":1,"kind":"partition","ts":%d,"period_ms":5000,"source":"%s","target":"bench",'
        '"topic":"%s.t%d","upstream_topic":"t%d","partition":%d,"record_count":%d,"byte_count":%d,'
        '"replication_latency_ms":{"min":%d,"max":%d,"avg":%.3f,"last":%d,"count":%d},'
        '"records_lag":%d,"source_end_offset":%d,"upstream_offset":%d,"target_offset":%d}')


def live_record(source: str, series: int, ts: int, seq: int) -> bytes:
    """A report whose values vary as a real target's do (bench/rollup_runs.record's are a few repeating
    numbers, which the state's LZ4 shrinks ~20x): each partition its own rate and record size, end offsets
    from its own base, counts, latencies and lag drawn anew each report (CRC-32 of the series and report:
    the same records on both sides and in every run)."""
    topic, partition = divmod(series, 10)
    h = zlib.crc32(b"%d:%d" % (series, seq))
    rate = 1 + zlib.crc32(b"%d" % series) % 400
    count = h % (2 * rate) + 1
    size = 100 + (h >> 9) % 1900
    low = 1 + (h >> 5) % 20
    high = low + (h >> 11) % 3000
    lag = (h >> 13) % 5000
    end = zlib.crc32(b"base%d" % series) * 1000 + seq * rate + h % rate
    return (LIVE % (ts, source, source, topic, topic, partition, count, count * size, low, high,
                    low + (high - low) * ((h >> 3) % 1000) / 1000, low + (h >> 7) % (high - low + 1), count,
                    lag, end, end - lag, end - lag + (h >> 17) % 7)).encode()


def kafka_tables(series: int, partitions: list[int], count: int, batch: int, periods: int, base: int,
                 offsets: list[int], period_ms: int, make: Callable[[str, int, int, int], bytes] = record
                 ) -> list[pa.Table]:
    """A batch's records as the Kafka source hands each task its partition's (offsets go on from `offsets`):
    each series once a period (`make`), keyed by subject (bench/rollup_runs.record_key)."""
    columns: list[dict[str, list]] = [{"offset": [], "kafka_ts": [], "value": []} for _ in range(count)]
    for r in range(periods):
        seq = batch * periods + r
        ts = base + seq * period_ms
        for s in range(series):
            p = partitions[s]
            c = columns[p]
            c["offset"].append(offsets[p])
            offsets[p] += 1
            c["kafka_ts"].append(ts)
            c["value"].append(make(SOURCE, s, ts, seq))
    return [pa.table({"topic": pa.array([TOPIC] * len(c["offset"]), pa.string()),
                      "partition": pa.array([p] * len(c["offset"]), pa.int32()),
                      "offset": pa.array(c["offset"], pa.int64()),
                      "kafka_ts": pa.array(c["kafka_ts"], pa.int64()),
                      "value": pa.array(c["value"], pa.binary())}) for p, c in enumerate(columns)]


def batch_windows(tables: list[pa.Table], now: int) -> pa.Table:
    """The batch's partial windows as the sink collects them from the tasks' answers."""
    mapper = PartitionPartials("bench", None, now + 10**7)
    answers = [a for k in tables for a in mapper(iter(k.to_batches(max_chunksize=10_000)))]
    return collect(pa.Table.from_batches(answers, schema=PARTS_SCHEMA)).partials.windows


def digest(client: redis.Redis) -> tuple[str, int]:
    """A digest of every window hash (as bench/merge_cpu.py's --digest) and how many there are."""
    out = hashlib.md5()
    keys = sorted(cast(list[bytes], list(client.scan_iter("srm:wh:*", count=10_000))))
    for at in range(0, len(keys), 5_000):
        pipe = client.pipeline(transaction=False)
        for key in keys[at:at + 5_000]:
            pipe.hgetall(key.decode())
        for key, fields in zip(keys[at:at + 5_000], pipe.execute(), strict=True):
            out.update(key)
            out.update(repr(sorted(cast(dict, fields).items())).encode())
    return out.hexdigest(), len(keys)


# --- measuring ---------------------------------------------------------------------------------------------

@dataclass
class Side:
    server: RedisServer
    client: redis.Redis

    @classmethod
    def start(cls) -> Side:
        server = RedisServer().start()
        return cls(server, redis.Redis.from_url(server.url))

    def counters(self) -> tuple[float, int, int]:
        return (redis_cpu_s(self.client), *redis_net_bytes(self.client))


def delta(before: tuple[float, int, int], after: tuple[float, int, int]) -> tuple[float, int, int]:
    return after[0] - before[0], after[1] - before[1], after[2] - before[2]


def run_thread(side: Side, writer: WindowWriter, batch: int, windows: pa.Table, every_size: bool
               ) -> dict[str, float]:
    """A: today's merge thread merging the whole batch."""
    before, t0, w0 = side.counters(), time.thread_time(), time.monotonic()
    writer.apply_all([(batch, windows)], every_size=every_size)
    cpu, wall = time.thread_time() - t0, time.monotonic() - w0
    cpu_redis, bytes_in, bytes_out = delta(before, side.counters())
    return {"a_cpu": cpu, "a_wall": wall, "a_redis": cpu_redis, "a_in": bytes_in, "a_out": bytes_out}


@dataclass
class TasksRun:
    figures: dict[str, float]
    costs: list[TaskCost]
    peaks: list[int]
    differences: int = 0


def run_tasks(side: Side, driver: WindowWriter, keys: list[str], tables: list[pa.Table], shared: pa.Table,
              batch: int, every_size: bool, now: int, compression: str | None, check: bool,
              straddle: bool = True, parts: int = 1) -> TasksRun:
    """B: each Kafka partition's task merging its own subjects, then the driver the shared rows; with
    `check`, the replays and the cut-off attempt of the module's doc (`straddle`: and the range straddling a
    task's offset)."""
    out = TasksRun({}, [], [])
    before, w0, parsing = side.counters(), time.monotonic(), 0.0
    for k, kafka in enumerate(tables):
        p0 = time.monotonic()
        windows = own_windows(kafka, now)  # the task's partials: made today, not the merge's work
        parsing += time.monotonic() - p0
        if check and batch == 4 and k == 1:
            try:
                merge_task(side.client, keys[k], kafka, windows, batch, every_size, now, compression,
                           cut_off=True, parts=parts)
            except CutOff:
                print(f"batch {batch} task {k}: an attempt cut off before its EXEC", flush=True)
        if check and parts > 1 and batch == 2 and k == 1:
            try:
                merge_task(side.client, keys[k], kafka, windows, batch, every_size, now, compression,
                           parts=parts, cut_after=1)
            except CutOff:
                print(f"batch {batch} task {k}: an attempt cut off after its first part", flush=True)
        if check and straddle and batch == 5 and k == 0:
            half = kafka.slice(0, kafka.num_rows // 2)
            first = merge_task(side.client, keys[k], half, own_windows(half, now), batch, every_size, now,
                               compression, parts=parts)
            print(f"batch {batch} task {k}: its first half of the records ({first.outcome})", flush=True)
        return_freed_memory()  # as a worker does after each task: the rise is the task's own
        with PeakRss() as peak:
            cost = merge_task(side.client, keys[k], kafka, windows, batch, every_size, now, compression,
                              parts=parts)
        out.peaks.append(peak.peak)
        out.costs.append(cost)
        if check and batch == 3 and k == 0:
            again = merge_task(side.client, keys[k], kafka, windows, batch, every_size, now, compression,
                               parts=parts)
            print(f"batch {batch} task {k} run again: {again.outcome}", flush=True)
            out.differences += again.outcome != "applied already"
    figures = out.figures
    figures["b_wall"] = time.monotonic() - w0 - parsing
    figures["b_redis"], figures["b_in"], figures["b_out"] = delta(before, side.counters())
    before, t0 = side.counters(), time.thread_time()
    driver.apply_all([(batch, shared)], every_size=every_size)
    figures["d_cpu"] = time.thread_time() - t0
    figures["d_redis"], figures["d_in"], figures["d_out"] = delta(before, side.counters())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--records", type=int, default=200_000, help="records a batch (a report a series a "
                        "period: records / series periods a batch)")
    parser.add_argument("--period-ms", type=int, default=5000, help="a series' metrics period")
    parser.add_argument("--coarse-every", type=int, default=3)
    parser.add_argument("--kafka-partitions", type=int, default=2)
    parser.add_argument("--parts", type=int, default=1, help="MULTIs a task's windows go in (by hash tag, as "
                        "the merge thread's 8), the state's SET in the last; 1: one MULTI, windows and state")
    parser.add_argument("--compression", default="lz4", choices=["none", "lz4", "zstd"])
    parser.add_argument("--values", default="regular", choices=["regular", "live"],
                        help="the reports' values: bench/rollup_runs.record's, or varying (live_record)")
    parser.add_argument("--restart-at", type=int, default=None)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--digest", action="store_true")
    args = parser.parse_args()
    compression = None if args.compression == "none" else args.compression
    periods = max(1, args.records // args.series)
    now0 = int(time.time() * 1000)
    base = now0 // 10_000 * 10_000 - args.batches * periods * args.period_ms - 60_000
    count = args.kafka_partitions
    partitions = [zlib.crc32(record_key(SOURCE, s)) % count for s in range(args.series)]
    keys = [state_key("bench", TOPIC, k, count) for k in range(count)]
    offsets = [0] * count
    a, b = Side.start(), Side.start()
    thread_writer = WindowWriter(a.client, "thread")  # A: today's merge thread
    driver_writer = WindowWriter(b.client, "driver")  # B: the driver's shared rows
    rows = []
    differences = 0
    print(f"{args.series} series, {periods} periods a batch ({periods * args.series} records), {count} Kafka "
          f"partitions, 1 min / 1 h every {args.coarse_every} batches, state {args.compression}, values "
          f"{args.values}, {args.parts} MULTIs a task", flush=True)
    try:
        for batch in range(args.batches):
            tables = kafka_tables(args.series, partitions, count, batch, periods, base, offsets,
                                  args.period_ms, live_record if args.values == "live" else record)
            now = base + (batch + 1) * periods * args.period_ms + 1_000
            windows = batch_windows(tables, now)
            shared = windows.filter(pc.not_equal(windows["level"], "p"))
            every_size = batch % args.coarse_every == 0 or batch == args.batches - 1
            if args.restart_at == batch:
                b.client.delete(*keys)
            if args.check and batch == 7:
                b.client.delete(keys[0])
            order = "A B" if batch % 2 == 0 else "B A"
            for side in order.split():
                return_freed_memory()
                if side == "A":
                    figures = run_thread(a, thread_writer, batch, windows, every_size)
                else:
                    tasks = run_tasks(b, driver_writer, keys, tables, shared, batch, every_size, now,
                                      compression, args.check, straddle=args.values == "regular",
                                      parts=args.parts)
            figures |= tasks.figures
            differences += tasks.differences
            stages: dict[str, float] = {}
            for cost in tasks.costs:
                for name, s in cost.stages.items():
                    stages[name] = stages.get(name, 0.0) + s
            tasks_cpu = sum(stages.values())
            state_cpu = stages.get("read", 0.0) + stages.get("encode", 0.0)
            if batch != args.restart_at:
                rows.append((tasks_cpu, state_cpu, figures["d_cpu"], figures["a_cpu"], figures["b_redis"],
                             figures["d_redis"], figures["a_redis"], figures["b_in"], figures["b_out"],
                             sum(c.state_bytes for c in tasks.costs), every_size))
            print(f"batch {batch} ({'every size' if every_size else 'finest only'}, {order}): "
                  f"{windows.num_rows} partial rows ({shared.num_rows} shared). A thread: CPU "
                  f"{figures['a_cpu']:.2f} s, Redis {figures['a_redis']:.2f} s, wall "
                  f"{figures['a_wall']:.2f} s, Redis in {figures['a_in']:,.0f} out {figures['a_out']:,.0f} "
                  "B. "
                  f"B tasks: CPU {tasks_cpu:.2f} s ("
                  + ", ".join(f"{n} {s:.2f}" for n, s in stages.items())
                  + f"), Redis {figures['b_redis']:.2f} s, wall {figures['b_wall']:.2f} s, Redis in "
                  f"{figures['b_in']:,.0f} out {figures['b_out']:,.0f} B; driver (shared rows) CPU "
                  f"{figures['d_cpu']:.2f} s, Redis {figures['d_redis']:.2f} s", flush=True)
            for k, (cost, peak) in enumerate(zip(tasks.costs, tasks.peaks, strict=True)):
                print(f"  task {k}: {cost.outcome}, {cost.subjects} subjects, state {cost.state_rows:,} "
                      f"rows, {cost.state_arrow / 2**20:.1f} MB Arrow, {cost.state_bytes / 2**20:.1f} MB "
                      "written, "
                      f"{cost.read_bytes / 2**20:.1f} MB read, MULTI wall {cost.write_wall:.2f} s, RSS rise "
                      f"{peak / 2**20:.0f} MB", flush=True)
            if args.check:
                (da, na), (db, nb) = digest(a.client), digest(b.client)
                same = da == db and na == nb
                differences += not same
                print(f"check batch {batch}: A {na} window hashes {da}, B {nb} {db}: "
                      f"{'equal' if same else 'NOT EQUAL'}", flush=True)
        if args.digest and not args.check:
            (da, na), (db, nb) = digest(a.client), digest(b.client)
            differences += (da, na) != (db, nb)
            print(f"digest A {da} of {na} window hashes, B {db} of {nb}: "
                  f"{'equal' if (da, na) == (db, nb) else 'NOT EQUAL'}", flush=True)
        for side_of, name in ((a, "A"), (b, "B")):
            memory = cast(dict, side_of.client.info("memory"))["used_memory_human"]
            print(f"Redis {name} used_memory {memory}, keys {side_of.client.dbsize()}")
    finally:
        a.server.stop()
        b.server.stop()
    if args.check:
        print(f"check: {'every batch equal' if not differences else f'{differences} differences'}")
        sys.exit(1 if differences else 0)
    steady = rows[1:] or rows
    for every_size in (False, True):
        kind = [r for r in steady if r[10] == every_size]
        if kind:
            m = [statistics.mean(float(r[i]) for r in kind) for i in range(10)]
            print(f"{'every size' if every_size else 'finest only'}, {len(kind)} batches: tasks {m[0]:.2f} s "
                  f"(state {m[1]:.2f}), driver shared {m[2]:.2f}, thread {m[3]:.2f}; Redis tasks {m[4]:.2f}, "
                  f"driver {m[5]:.2f}, thread {m[6]:.2f}; tasks' Redis in {m[7] / 2**20:.0f} MB out "
                  f"{m[8] / 2**20:.0f} MB, state written {m[9] / 2**20:.0f} MB")
    m = [statistics.mean(float(r[i]) for r in steady) for i in range(10)]
    print(f"tasks_merge_cpu_s={m[0]:.2f} tasks_state_cpu_s={m[1]:.2f} driver_shared_cpu_s={m[2]:.2f} "
          f"thread_merge_cpu_s={m[3]:.2f} tasks_redis_cpu_s={m[4] + m[5]:.2f} thread_redis_cpu_s={m[6]:.2f} "
          f"state_mb={m[9] / 2**20 / count:.1f} ratio={(m[0] + m[2]) / m[3]:.2f}")


if __name__ == "__main__":
    main()
