"""The cold read of partitions' offset windows (OffsetHistory.load: a driver restart, a partition first met, a
task without its record) in CPU seconds (hosts are shared), with a real redis-server.

Fills Redis with --series partitions' stored 10 s windows (partitions of 10 a topic, --windows windows each,
the newest at the same window for all; each member as the merge writes it, member_text.member_column, with
a partition's eight metrics: counts, latency, lag, the three offsets, lag in seconds), then loads every
partition from the window 60 before the newest on (lag in seconds' 10 minutes, as judge_batch asks after a
restart), into an empty OffsetHistory, in a child process a run: the tree's own code (--tree, default this
one) and, with --old, the code of another tree (its venv's python), interleaved (old, new, old, new ...).
Per run: the child's CPU (process_time: its Python, hiredis, the Arrow/numpy kernels), its wall time and
its RSS rise, Redis's CPU (INFO), the bytes Redis sent, the commands it ran, and a digest of the ring the
load left (every array of it): the runs' digests must be equal (exit 1 if not).

Last line: `cold_read_cpu_s=<s> cold_read_redis_cpu_s=<s> cold_read_wall_s=<s>` of the tree's runs (their
median) and with --old `ratio_to_old=<old CPU / new CPU>` (process and Redis CPU added up).
--profile prints cProfile's view of each load (its figures are then the profiler's, not the code's).
Usage: python bench/cold_read.py [--series 100000] [--windows 6] [--repeat 2] [--old TREE] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

HERE = Path(__file__).resolve().parent.parent
NEWEST = 170_000_000  # the newest window's number (Nov 2023)
WINDOW_MS = 10_000
SPAN = 60  # windows before the newest a load reads from
TARGET, SOURCE = "bench", "tput"
METRICS = ("record_count", "byte_count", "replication_latency_ms", "records_lag", "source_end_offset",
           "upstream_offset", "target_offset", "lag_seconds")
CHUNK = 5_000  # partitions filled at a time


def partition(p: int) -> tuple[str, str, str, int]:
    return TARGET, SOURCE, f"{SOURCE}.t{p // 10}", p % 10


def fill(client: Any, series: int, windows: int) -> int:
    """Every partition's windows, written as the merge writes them; the bytes of their members."""
    import pyarrow as pa

    from aggregator.member_text import member_column
    from aggregator.resp_commands import execute_in_multi, packed
    from aggregator.stored_windows import SCHEMA
    from contract import redis_layout as layout

    total = 0
    index = np.array([layout.METRIC_INDEX[m] for m in METRICS], np.int64)
    for first in range(0, series, CHUNK):
        parts = np.arange(first, min(series, first + CHUNK))
        number = NEWEST - windows + 1 + np.arange(windows)
        p, w, m = (a.reshape(-1) for a in np.meshgrid(parts, number, np.arange(len(METRICS)), indexing="ij"))
        end = 3_000_000_000 + p * 1_000 + (w - NEWEST) * 2_000 + 1_000 + p % 7
        lag = (p + w) % 13
        value = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5, m == 6],
                          [np.full(len(p), 40.0), np.full(len(p), 4_000.0), 4.5 + (p % 9) / 2, lag, end,
                           end - lag, end - lag], (p % 5) / 4)
        start = w * WINDOW_MS
        table = pa.table({"series": p, "metric": index[m], "start": start, "n": np.full(len(p), 2.0),
                          "sum": value * 2, "min": value - 1, "max": value, "last": value,
                          "last_ts": start + 5_000 + p % 4_000}, schema=SCHEMA)
        members = member_column(table)
        keys = [layout.series_key(layout.SeriesId(*partition(int(s)), METRICS[0]), "10s")
                for s in parts.tolist()]
        # One HSET a partition: its windows' fields and members, and its newest window.
        args, counts = [], []
        member_text = members["member"].to_pylist()
        starts = members["start"].to_pylist()
        for k, key in enumerate(keys):
            mine = slice(k * windows, (k + 1) * windows)
            fields = [x for pair in zip(map(str, starts[mine]), member_text[mine], strict=True) for x in pair]
            args += ["HSET", key, *fields, layout.NEWEST_FIELD, str(starts[mine][-1])]
            counts.append(len(fields) + 4)
            total += sum(map(len, member_text[mine]))
        execute_in_multi(client, packed(pa.array(args, pa.string()), np.array(counts)), len(keys))
    return total


def child(tree: str, url: str, series: int, profile: bool) -> None:
    """One load of every partition, with `tree`'s code: a JSON line of what it cost and the ring's digest."""
    sys.path.insert(0, tree)
    import redis

    from aggregator.offset_history import OffsetHistory

    client = redis.Redis.from_url(url)
    client.ping()
    history = OffsetHistory()
    rows = history.row_of([partition(p) for p in range(series)])
    low = np.full(series, NEWEST - SPAN, np.int64)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    profiler = cProfile.Profile() if profile else None
    began, wall = time.process_time(), time.monotonic()
    if profiler:
        profiler.enable()
    history.load(client, rows, low)
    cpu, wall = time.process_time() - began, time.monotonic() - wall
    if profiler:
        profiler.disable()
        for order in ("tottime", "cumulative"):
            pstats.Stats(profiler, stream=sys.stderr).sort_stats(order).print_stats(30)
    digest = hashlib.sha256()
    for array in (history.newest, history.complete_from):
        digest.update(array.tobytes())
    for block in history.blocks:
        for held in (block.window, block.delta, block.base, block.based, block.last_at):
            digest.update(held.tobytes())
        for row in sorted(block.wide):
            digest.update(b"%d" % row + block.wide[row].tobytes())
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "rss_rise_mb": (resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss - rss) / 1024, "digest": digest.hexdigest()[:16]}))


def run(tree: Path, url: str, series: int, client: Any, profile: bool) -> dict:
    from bench.process_cpu import redis_cpu_s

    python = tree / ".venv" / "bin" / "python"
    stats = cast(dict, client.info("stats"))
    before = redis_cpu_s(client), stats["total_net_output_bytes"], stats["total_commands_processed"]
    out = subprocess.run([str(python), str(Path(__file__).resolve()), "--child", str(tree), "--url", url,
                          "--series", str(series), *(["--profile"] if profile else [])], cwd=tree,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    if out.returncode:
        sys.exit(f"the load in {tree} failed: {out.stderr[-2000:]}")
    if profile:
        print(out.stderr, flush=True)
    stats = cast(dict, client.info("stats"))
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(redis_cpu_s=redis_cpu_s(client) - before[0],
                  redis_out_mb=(stats["total_net_output_bytes"] - before[1]) / 1e6,
                  redis_commands=stats["total_commands_processed"] - before[2] - 2)  # less the stats' INFO
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--windows", type=int, default=6, help="stored windows a partition")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each tree")
    parser.add_argument("--old", type=Path, help="a tree whose load runs too, interleaved (its .venv)")
    parser.add_argument("--tree", type=Path, default=HERE)
    parser.add_argument("--profile", action="store_true", help="cProfile's view of each load (slower)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.url, args.series, args.profile)
        return
    sys.path.insert(0, str(HERE))
    import redis

    from stack.redis_server import RedisServer

    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        client.config_set("appendonly", "no")  # the bench reads; an AOF rewrite would only add noise
        began = time.monotonic()
        size = fill(client, args.series, args.windows)
        used = cast(dict, client.info("memory"))["used_memory"]
        print(f"filled {args.series} partitions x {args.windows} windows ({size / 1e6:.0f} MB of members, "
              f"Redis {used / 1e6:.0f} MB) in {time.monotonic() - began:.0f} s", flush=True)
        trees = [("new", args.tree.resolve())]
        if args.old:
            trees.insert(0, ("old", args.old.resolve()))
        results: dict[str, list[dict]] = {name: [] for name, _ in trees}
        for r in range(args.repeat):
            for name, tree in trees:
                result = run(tree, server.url, args.series, client, args.profile)
                results[name].append(result)
                print(f"run {r} {name}: " + " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                                     for k, v in result.items()), flush=True)
        digests = {res["digest"] for rs in results.values() for res in rs}
        print("rings equal" if len(digests) == 1 else f"RINGS DIFFER: {digests}", flush=True)

        def median(name: str, key: str) -> float:
            return statistics.median(res[key] for res in results[name])

        line = (f"cold_read_cpu_s={median('new', 'cpu_s'):.2f} "
                f"cold_read_redis_cpu_s={median('new', 'redis_cpu_s'):.2f} "
                f"cold_read_wall_s={median('new', 'wall_s'):.2f}")
        if args.old:
            old = median("old", "cpu_s") + median("old", "redis_cpu_s")
            line += f" ratio_to_old={old / (median('new', 'cpu_s') + median('new', 'redis_cpu_s')):.2f}"
        print(line)
        if len(digests) != 1:
            sys.exit(1)
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
