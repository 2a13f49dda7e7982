"""The sink's window merge alone, in the cardinality line's shape, in CPU seconds (hosts are shared).

Batches of --series series (100,000 partitions of 10 a topic: 110,001 subjects with their topics and the
replication), each series reporting once a period, --periods periods a batch (--period-ms apart: 1 s, as the
cardinality line's backlog), read by the tasks' own code (PartitionPartials over two Kafka partitions,
collected as the sink collects them), then merged by a WindowWriter into a real redis-server, a batch at a
time, in this thread. Per batch: the merge's CPU in this thread (thread_time: its Python and the Arrow/numpy
kernels it runs), Redis's CPU (INFO cpu), wall time and the process's peak RSS during the merge.

--coarse-every K merges the 1 min and 1 h windows at every Kth merge only (the others at the finest size),
as the merge thread does when its merges come faster than merge_thread.COARSE_INTERVAL_S; --group G makes
each of the --batches merges take G batches together (the merge thread's merges of batches that come
quickly: the default line's live query, ~10 batches a merge at 0.5 s a batch); --gil-probe runs
a pure-Python thread beside the merge, as the sink's thread is, and prints how much of the merge's wall time
the probe could not run (the merge holding the GIL; on a busy host, the CPU taken too). --profile prints
cProfile's view (by the thread's CPU time: the merge's own work, not its waits on Redis) of batches 2 on,
the merges at every size and those at the finest only apart; --digest a
digest of every window hash at the end (--base fixes the clock, so that two trees' digests compare).

Last line: `merge_python_cpu_s=<s> merge_redis_cpu_s=<s> merge_wall_s=<s>` (and with --gil-probe
`merge_gil_held_s=<s>`) a batch, the mean over batches 1 on (batch 0 merges into an empty Redis); the line
before gives the same means for the merges at every size and at the finest only apart.
Usage: python bench/merge_cpu.py [--series 100000] [--batches 7] [--periods 2] [--period-ms 1000]
[--coarse-every 1] [--group 1] [--gil-probe] [--profile] [--digest --base MS]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import pstats
import statistics
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import redis

from aggregator.partition_partials import PARTS_SCHEMA, PartitionPartials, collect
from aggregator.window_writer import WindowWriter
from bench.process_cpu import redis_cpu_s
from bench.rollup_runs import record, record_key
from contract.replication_policy import metrics_topic
from stack.redis_server import RedisServer

SOURCE = "tput"


def batch_partials(series: int, partitions: list[int], batch: int, periods: int, base: int, now: int,
                   period_ms: int = 1000, source: str = SOURCE) -> pa.Table:
    """The batch's partial windows as the sink hands them to its merge (two Kafka partitions' tasks), of
    `source`'s reports (bench/state_store_merge.py merges the same records in Spark)."""
    columns: dict[int, dict[str, list]] = {p: {"offset": [], "kafka_ts": [], "value": []} for p in (0, 1)}
    for r in range(periods):
        seq = batch * periods + r
        ts = base + seq * period_ms
        for s in range(series):
            c = columns[partitions[s]]
            c["offset"].append(len(c["offset"]))
            c["kafka_ts"].append(ts)
            c["value"].append(record(source, s, ts, seq))
    mapper = PartitionPartials("bench", None, now + 10**7)
    answers: list[pa.RecordBatch] = []
    for p, c in columns.items():
        n = len(c["offset"])
        kafka = pa.table({"topic": pa.array([metrics_topic(source)] * n, pa.string()),
                          "partition": pa.array([p] * n, pa.int32()),
                          "offset": pa.array(c["offset"], pa.int64()),
                          "kafka_ts": pa.array(c["kafka_ts"], pa.int64()),
                          "value": pa.array(c["value"], pa.binary())})
        answers.extend(mapper(iter(kafka.to_batches(max_chunksize=10_000))))
    return collect(pa.Table.from_batches(answers, schema=PARTS_SCHEMA)).partials.windows


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return 0.0


class GilProbe:
    """A pure-Python loop in its own thread: how far it gets while the merge runs, against alone."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        time.sleep(0.2)
        begin, t0 = self.count, time.monotonic()
        time.sleep(1.0)
        self.rate = (self.count - begin) / (time.monotonic() - t0)

    def _spin(self) -> None:
        while not self._stop:
            for _ in range(1000):
                pass
            self.count += 1

    def stop(self) -> None:
        self._stop = True
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--periods", type=int, default=2, help="reports of each series a batch")
    parser.add_argument("--period-ms", type=int, default=1000,
                        help="event time between periods (5000: a live target's reports, a new 10 s window "
                             "every other period, the merge's kept windows filling up)")
    parser.add_argument("--coarse-every", type=int, default=1)
    parser.add_argument("--group", type=int, default=1,
                        help="batches a merge takes together (--batches merges of --group batches each), "
                             "as the merge thread merges batches that come quickly")
    parser.add_argument("--gil-probe", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--base", type=int, default=None, help="the clock (epoch ms) the batches start from")
    args = parser.parse_args()

    server = RedisServer().start()
    client = redis.Redis.from_url(server.url)
    now = int(time.time() * 1000)
    base = (args.base or now) // 10_000 * 10_000 - args.batches * args.group * args.periods * args.period_ms \
        - 60_000
    partitions = [zlib.crc32(record_key(SOURCE, s)) % 2 for s in range(args.series)]
    writer = WindowWriter(client, "merge-cpu")
    # By the thread's CPU time: the merge's own work, not its waits on Redis.
    profiles = {True: cProfile.Profile(time.thread_time), False: cProfile.Profile(time.thread_time)} \
        if args.profile else None
    probe = GilProbe() if args.gil_probe else None

    rows = []
    try:
        for b in range(args.batches):
            group = [(i, batch_partials(args.series, partitions, i, args.periods, base, now, args.period_ms))
                     for i in range(b * args.group, (b + 1) * args.group)]
            windows = pa.concat_tables([w for _, w in group])
            every_size = b % args.coarse_every == 0 or b == args.batches - 1
            profile = profiles[every_size] if profiles and b >= 2 else None
            if profile:
                profile.enable()
            Path("/proc/self/clear_refs").write_text("5")  # the peak RSS from here on
            rss_before = peak_rss_mb()
            probed = probe.count if probe else 0
            r0, t0, w0 = redis_cpu_s(client), time.thread_time(), time.monotonic()
            writer.apply_all(group, every_size=every_size)
            t1, w1 = time.thread_time(), time.monotonic()
            r1 = redis_cpu_s(client)
            if profile:
                profile.disable()
            held, held_s = "", 0.0
            if probe:
                held_s = max(0.0, (w1 - w0) - (probe.count - probed) / probe.rate)
                held = f", probe held off {held_s:.2f} s of {w1 - w0:.2f}"
            rows.append((t1 - t0, r1 - r0, w1 - w0, held_s, every_size))
            sizes = "every size" if every_size else "finest only"
            named = f"batch {b}" if args.group == 1 else f"merge {b} (batches {group[0][0]}-{group[-1][0]})"
            print(f"{named} ({sizes}): {windows.num_rows} partial rows, "
                  f"merge CPU {t1 - t0:.2f} s, Redis CPU {r1 - r0:.2f} s, wall {w1 - w0:.2f} s{held}, "
                  f"RSS {rss_before:.0f} MB, peak in the merge {peak_rss_mb():.0f} MB", flush=True)
        memory = cast(dict, client.info("memory"))["used_memory_human"]
        print(f"Redis used_memory {memory}, keys {client.dbsize()}")
        for every_size, profile in (profiles or {}).items():
            if not profile.getstats():
                continue
            out = io.StringIO()
            stats = pstats.Stats(profile, stream=out)
            stats.sort_stats("tottime").print_stats(40)
            stats.sort_stats("cumulative").print_stats(50)
            print(f"profile of the merges {'at every size' if every_size else 'at the finest size only'}:")
            print(out.getvalue())
        if args.digest:
            digest = hashlib.md5()
            for key in sorted(client.scan_iter("srm:wh:*")):
                digest.update(key)
                digest.update(repr(sorted(cast(dict, client.hgetall(key)).items())).encode())
            print(f"digest {digest.hexdigest()} of {client.dbsize()} keys")
    finally:
        if probe:
            probe.stop()
        server.stop()
    steady = rows[1:] or rows
    for every_size in (False, True):
        kind = [r for r in steady if r[4] == every_size]
        if kind and len(kind) < len(steady):
            means = [statistics.mean(r[i] for r in kind) for i in range(4)]
            gil = f", GIL held {means[3]:.2f} s" if probe else ""
            print(f"{'every size' if every_size else 'finest only'}, {len(kind)} merges: Python CPU "
                  f"{means[0]:.2f} s, Redis CPU {means[1]:.2f} s, wall {means[2]:.2f} s{gil}")
    python, redis_s, wall, held_s = (statistics.mean(r[i] for r in steady) for i in range(4))
    print(f"merge_python_cpu_s={python:.2f} merge_redis_cpu_s={redis_s:.2f} merge_wall_s={wall:.2f}"
          + (f" merge_gil_held_s={held_s:.2f}" if probe else ""))


if __name__ == "__main__":
    main()
