"""The per-batch path before the merge thread, in the cardinality line's shape, in CPU seconds (hosts are
shared): the executors' tasks, then the sink's thread, with a real redis-server and no Spark.

Batches of --series series (partitions of 10 a topic, as bench/rollup_runs.py produces them), each series
reporting --periods times a batch, 1 s apart; the records of a batch split over two Kafka partitions by
their key, as the cardinality line's two-partition topic. Per batch:
- tasks: each Kafka partition's records through PartitionPartials, in this thread (thread_time: what a
  task's Python worker spends on it, without Spark's Arrow transfer), their reports judged over their
  offset records in the same Redis (offset_records, since s31), their latest values and verdicts written
  and their verdicts' summary parts made (task_writes, task_verdicts, since s32), and collect (the driver's
  merge of their answers);
- sink: RedisRollupSink.write (subject cap, plan, latest values, verdicts and summaries, the
  MULTI that stages the windows), the merge thread replaced by a stub that only takes the staged windows
  (its own bench is bench/merge_cpu.py), thread_time by stage (the sink's debug lines), and Redis's CPU.
Same records per batch at --series 100000 --periods 2 and --series 10000 --periods 20: the ratio of the
two is the series growth of each stage.

--profile prints cProfile's view of the sink (or, with --profile-tasks, of the tasks) over batches 2 on;
--digest prints a digest of every key the sink wrote (latest values, verdicts, summaries, the staged windows
with their lag-in-seconds samples, indexes, counts), with the clock fixed by --base: two trees' digests
compare.
Last line: `task_cpu_s=<s> collect_cpu_s=<s> sink_cpu_s=<s> sink_redis_cpu_s=<s> task_redis_cpu_s=<s>` a
batch, the mean over batches 1 on (Redis's CPU while the sink writes, and while the tasks run: since s32 the
tasks write their latest values and verdicts themselves). The tasks run at the sink's clock (before s32 at
the clock plus 10^7 ms, which leaves every verdict out of its lookback once the tasks summarise them).
Usage: python bench/sink_cpu.py [--series 100000] [--periods 2] [--batches 5] [--profile] [--profile-tasks]
[--digest --base MS]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import logging
import pstats
import re
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import redis

from aggregator import redis_sink
from aggregator.merge_thread import MergeThread
from aggregator.partition_partials import PARTS_SCHEMA, PartitionPartials, collect
from aggregator.redis_sink import RedisRollupSink
from bench.process_cpu import redis_cpu_s
from bench.rollup_runs import record, record_key
from stack.redis_server import RedisServer

SOURCE = "tput"
TOPIC = "srm-metrics.tput.internal"


def kafka_columns(series: int, partitions: list[int], batch: int, periods: int, base: int,
                  offsets: list[int], make: Callable[[str, int, int, int], bytes | tuple[bytes, ...]]
                  = record, every_ms: int = 1000) -> list[pa.Table]:
    """A batch's records as the Kafka source hands each task its partition's (offsets go on from
    `offsets`): `make(source, series, ts, seq)` of each series every `every_ms` (several records of the
    series' key when it gives a tuple)."""
    columns: dict[int, dict[str, list]] = {p: {"offset": [], "kafka_ts": [], "value": []} for p in (0, 1)}
    for r in range(periods):
        seq = batch * periods + r
        ts = base + seq * every_ms
        for s in range(series):
            c = columns[partitions[s]]
            made = make(SOURCE, s, ts, seq)
            for value in made if isinstance(made, tuple) else (made,):
                c["offset"].append(offsets[partitions[s]])
                offsets[partitions[s]] += 1
                c["kafka_ts"].append(ts)
                c["value"].append(value)
    return [pa.table({"topic": pa.array([TOPIC] * len(c["offset"]), pa.string()),
                      "partition": pa.array([p] * len(c["offset"]), pa.int32()),
                      "offset": pa.array(c["offset"], pa.int64()),
                      "kafka_ts": pa.array(c["kafka_ts"], pa.int64()),
                      "value": pa.array(c["value"], pa.binary())}) for p, c in columns.items()]


class StagedOnly:
    """The merge thread's place: the sink hands it each batch's windows, which stay staged in Redis."""

    def submit(self, batch_id: int, windows: pa.Table) -> None:
        pass

    def wait_idle(self) -> None:
        pass

    def raise_failure(self) -> None:
        pass


class StageTimes(logging.Handler):
    """The sink's debug lines, read back as ms by stage."""

    PATTERNS = {
        "judged": r"reports judged in (\d+) ms", "latest": r"latest values written in (\d+) ms",
        "verdicts": r"summaries in (\d+) ms", "plan": r"\(plan (\d+)", "staged": r"staged (\d+)",
    }

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.ms: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for name, pattern in self.PATTERNS.items():
            found = re.search(pattern, text)
            if found:
                self.ms[name] = float(found.group(1))


def print_profile(profile: cProfile.Profile) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(60)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--periods", type=int, default=2, help="reports of each series a batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-tasks", action="store_true")
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--base", type=int, default=None, help="the clock (epoch ms) the batches start from")
    args = parser.parse_args()

    now = args.base + args.batches * args.periods * 1000 + 60_000 if args.base else int(time.time() * 1000)
    base = now // 10_000 * 10_000 - args.batches * args.periods * 1000 - 60_000
    if args.base:  # the sink's clock too (verdict summaries age by it)
        redis_sink._now_ms = lambda: now
    partitions = [zlib.crc32(record_key(SOURCE, s)) % 2 for s in range(args.series)]
    offsets = [0, 0]
    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    sink = RedisRollupSink(server.url, "sink-cpu", target="bench")
    sink._windows = cast(MergeThread, StagedOnly())
    stages = StageTimes()
    logging.getLogger("aggregator.redis_sink").addHandler(stages)
    logging.getLogger("aggregator.redis_sink").setLevel(logging.DEBUG)
    # The tasks judge their reports over offset records in this Redis; nothing to wait for (the windows are
    # staged, never merged: StagedOnly).
    # The tasks' clock is the sink's (the sink plans each batch with the clock it then summarises at).
    mapper = PartitionPartials("bench", None, now, server.url)
    profile = cProfile.Profile() if args.profile or args.profile_tasks else None

    rows = []
    try:
        for b in range(args.batches):
            tables = kafka_columns(args.series, partitions, b, args.periods, base, offsets)
            task_cpu = []
            answers: list[pa.RecordBatch] = []
            task_redis = redis_cpu_s(client)
            if profile and args.profile_tasks and b >= 2:
                profile.enable()
            for kafka in tables:
                t0 = time.thread_time()
                answers.extend(mapper(iter(kafka.to_batches(max_chunksize=10_000))))
                task_cpu.append(time.thread_time() - t0)
            task_redis = redis_cpu_s(client) - task_redis
            t0 = time.thread_time()
            collected = collect(pa.Table.from_batches(answers, schema=PARTS_SCHEMA))
            collect_cpu = time.thread_time() - t0
            if profile and args.profile_tasks:
                profile.disable()
            del tables, answers
            if profile and args.profile and b >= 2:
                profile.enable()
            r0, t0, w0 = redis_cpu_s(client), time.thread_time(), time.monotonic()
            sink.write(collected.partials, b, require_state=b > 0)
            t1, w1 = time.thread_time(), time.monotonic()
            r1 = redis_cpu_s(client)
            if profile and args.profile:
                profile.disable()
            rows.append((sum(task_cpu), collect_cpu, t1 - t0, r1 - r0, task_redis))
            print(f"batch {b}: {collected.records} records, {collected.latest_candidates} latest candidates; "
                  f"tasks CPU {' + '.join(f'{c:.2f}' for c in task_cpu)} s, collect {collect_cpu:.2f} s; "
                  f"sink CPU {t1 - t0:.2f} s (wall {w1 - w0:.2f}; by stage, wall ms: "
                  f"{', '.join(f'{k} {v:.0f}' for k, v in stages.ms.items())}), Redis CPU {r1 - r0:.2f} s "
                  f"(the tasks' {task_redis:.2f} s)",
                  flush=True)
        if profile:
            print_profile(profile)
        if args.digest:
            digest = hashlib.md5()
            keys = sorted(client.scan_iter("*"))
            for key in keys:
                kind = cast(bytes, client.type(key))
                digest.update(key + kind)
                value = {b"hash": client.hgetall, b"set": client.smembers, b"string": client.get,
                         b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                         b"list": lambda k: client.lrange(k, 0, -1)}[kind](key)
                digest.update(repr(sorted(value.items()) if isinstance(value, dict) else
                                   sorted(value) if isinstance(value, set) else value).encode())
            print(f"digest {digest.hexdigest()} of {len(keys)} keys")
    finally:
        server.stop()
    steady = rows[1:] or rows
    task, coll, sink_s, redis_s, task_redis_s = (statistics.mean(r[i] for r in steady) for i in range(5))
    print(f"task_cpu_s={task:.2f} collect_cpu_s={coll:.2f} sink_cpu_s={sink_s:.2f} "
          f"sink_redis_cpu_s={redis_s:.2f} task_redis_cpu_s={task_redis_s:.2f}")


if __name__ == "__main__":
    main()
