"""Aggregator throughput, freshness and driver load on a real Kafka broker, Redis and local[2] Spark.

The default line, 2,000 series x 800 reports (the many-series line is bench/aggregator_cardinality.py):

1. Throughput, driver load, freshness and where the CPU goes: the runs of bench/rollup_runs.py (its
   docstring says how each is measured) over --series x --periods reports, then live at --rate.
2. `driver_cpu_growth` = the driver's CPU per batch of the throughput run / CPU per batch of a run with
   the same series, the same batch count and the same event-time span per batch, but a quarter of the
   records per series (a report every 4 periods instead of every period; --skip-growth leaves it out).
   The driver's peak RSS (VmHWM) is printed after the throughput run.
3. Bad records (bad_record_cost): the executor's function on one task's 50k records with 5 % bad ones of
   mixed kinds, over the same batch clean, in CPU time (no Kafka or Spark; `--bad-records-only` runs
   only this).

Last line: `aggregator_rps=<n> freshness_p50_ms=<ms> freshness_p99_ms=<ms> driver_bytes_per_record=<b>
driver_cpu_growth=<x> bad_record_cost_ratio=<x> aggregator_rps_finest=<n>`; targets 100 000 records/s,
p99 1 000 ms at 20 000 records/s, growth 1.25 and bad records 1.5, the ratios to them on the line before.
`aggregator_rps` ends when the last batch's windows are merged at every size, `aggregator_rps_finest`
when its 10 s windows are (the coarser ones wait up to ~10 s of quiet after a drain: rollup_runs).
`--cardinality` runs bench/aggregator_cardinality.py's line instead (the same as calling it; 100,000 x
16 unless --series and --periods say otherwise), so one command line runs over trees from before the
split too. Run it alone on the host (nothing else competing for its cores).
Usage: python bench/aggregator.py [--series 2000] [--periods 800] [--rate 20000] [--seconds 30]
[--warm-up 15] [--max-offsets 200000] [--skip-growth] [--cardinality] [--bad-records-only]
[--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench import aggregator_cardinality
from bench.rollup_runs import (
    DriverLoad,
    add_run_options,
    bench_stack,
    freshness,
    percentiles,
    record,
    throughput,
)
from contract.replication_policy import metrics_topic

TARGET_RPS, TARGET_P99_MS, TARGET_CPU_GROWTH, TARGET_BAD_RATIO = 100_000, 1_000, 1.25, 1.5
GROWTH = 4  # records per series of the throughput run / of the growth baseline


# Bad records of mixed kinds, as a careless or hostile writer sends them (bad_record_cost).
BAD_RECORDS = (
    lambda good: b"\x00garbage " + good[:40],  # not JSON
    lambda good: good.replace(b'"record_count":', b'"record_count":"many",', 1)[:-1] + b"}",  # mistyped
    lambda good: good[: len(good) // 2],  # cut short
    lambda good: good.replace(b'"records_lag":', b'"records_lag":9007199254740993,"x":', 1),  # past 2^53
    lambda good: b"[" + good + b"]",  # no object
    lambda good: good.replace(b'"source":"', b'"source":"forged', 1),  # another source than its topic's
)


def bad_record_cost(records: int, bad_share: float, repeat: int) -> float:
    """The executor's function (partition_partials.PartitionPartials: parse, rules, partial windows) on
    one task's batch of `records` records with `bad_share` of them bad (BAD_RECORDS in turn) over the same
    batch clean: the median of `repeat` runs of each, interleaved. No Kafka or Spark: the function's time,
    which is where a bad record's cost was (each made the batch's parse read halves again).

    The ratio is of CPU time (the process's, Arrow's reader threads included). Wall time is printed
    too, but on a shared 2-core host it moved with the load (the clean time alone from 224 to 574 ms
    between runs of one session), and on an idle one it credits the clean batch with the JSON reader's
    second thread, which a Spark executor running a task per core does not have to spare."""
    from aggregator.partition_partials import PartitionPartials  # only this part needs it

    now = int(time.time() * 1000)
    clean = [record("bad", s % 2000, now - 60_000 + s // 2000 * 1000, s) for s in range(records)]
    every = round(1 / bad_share)
    # Record i reports series i % 2000: a bad record every `every` records, shifted by one each round
    # of series, so the bad ones are spread over the series (a fixed stride made 100 series bad in
    # every record, and the bad batch had 5 % fewer valid series to aggregate than the clean one).
    mixed = [BAD_RECORDS[(i // every) % len(BAD_RECORDS)](v) if (i + i // 2000) % every == every - 1 else v
             for i, v in enumerate(clean)]

    def batch(values: list[bytes]) -> pa.Table:
        return pa.table({"topic": [metrics_topic("bad")] * len(values),
                         "partition": pa.array([0] * len(values), pa.int32()),
                         "offset": pa.array(range(len(values)), pa.int64()),
                         "kafka_ts": pa.array([now] * len(values), pa.int64()), "value": pa.array(values)})

    tables = {"clean": batch(clean), "bad": batch(mixed)}
    cpu: dict[str, list[float]] = {"clean": [], "bad": []}
    wall: dict[str, list[float]] = {"clean": [], "bad": []}
    for _ in range(repeat):
        for name, table in tables.items():
            began, began_cpu = time.perf_counter(), time.process_time()
            list(PartitionPartials("bench", None, now)(iter(table.to_batches())))
            cpu[name].append(time.process_time() - began_cpu)
            wall[name].append(time.perf_counter() - began)
    ms = {(kind, name): statistics.median(times[name]) * 1000
          for kind, times in (("cpu", cpu), ("wall", wall)) for name in times}
    print(f"bad records: a task's {records} records in {ms['cpu', 'clean']:.0f} ms of CPU clean, "
          f"{ms['cpu', 'bad']:.0f} ms with {sum(v != c for v, c in zip(mixed, clean, strict=True))} bad of "
          f"{len(BAD_RECORDS)} kinds (wall {ms['wall', 'clean']:.0f} and {ms['wall', 'bad']:.0f} ms, ratio "
          f"{ms['wall', 'bad'] / ms['wall', 'clean']:.2f}; median of {repeat} runs each, interleaved)")
    return ms["cpu", "bad"] / ms["cpu", "clean"]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(parser, series=2000, periods=800)  # 1.6M records: 6 steady batches of 200k
    parser.add_argument("--skip-growth", action="store_true", help="no growth baseline run")
    parser.add_argument("--cardinality", action="store_true",
                        help="bench/aggregator_cardinality.py's line instead (100,000 x 16 by default)")
    parser.add_argument("--bad-records-only", action="store_true",
                        help="only bad_record_cost_ratio (no Kafka, Spark or Redis)")
    args = parser.parse_args()
    if args.cardinality and not args.bad_records_only:
        defaults = parser.parse_args([])
        args.series = aggregator_cardinality.SERIES if args.series == defaults.series else args.series
        args.periods = aggregator_cardinality.PERIODS if args.periods == defaults.periods else args.periods
        aggregator_cardinality.run(args)
        return
    bad_ratio = bad_record_cost(50_000, 0.05, 9)
    if args.bad_records_only:
        print(f"ratio to target: {bad_ratio / TARGET_BAD_RATIO:.2f}x of {TARGET_BAD_RATIO}")
        print(f"bad_record_cost_ratio={bad_ratio:.2f}")
        return
    growth = float("nan")
    with bench_stack(args.spark_conf, args.memory_timeline) as stack:
        drained = throughput(stack, "tput", args.series, args.periods, args.max_offsets)
        print(f"driver: RSS {DriverLoad.rss_mb('VmRSS'):.0f} MB, peak {DriverLoad.rss_mb():.0f} MB after "
              f"batches of {args.max_offsets} records")
        if not args.skip_growth:
            baseline = throughput(stack, "tput1x", args.series, args.periods, args.max_offsets // GROWTH,
                                  every=GROWTH)
            growth = drained.cpu_per_batch_s / baseline.cpu_per_batch_s
            print(f"driver CPU per batch: {drained.cpu_per_batch_s * 1000:.0f} ms at {GROWTH}x records per "
                  f"series, {baseline.cpu_per_batch_s * 1000:.0f} ms at 1x")
        samples = freshness(stack, args.series, args.rate, args.seconds, args.warm_up)
        stack.tree_peak_mb()
    p50, p99 = percentiles(samples)
    print(f"ratio to targets: rps {drained.rps / TARGET_RPS:.2f}x of {TARGET_RPS}, "
          f"p99 {p99 / TARGET_P99_MS:.2f}x of {TARGET_P99_MS} ms ({len(samples)} samples), "
          f"cpu growth {growth / TARGET_CPU_GROWTH:.2f}x of {TARGET_CPU_GROWTH}, "
          f"bad record cost {bad_ratio / TARGET_BAD_RATIO:.2f}x of {TARGET_BAD_RATIO}")
    print(f"aggregator_rps={drained.rps:.0f} freshness_p50_ms={p50:.0f} freshness_p99_ms={p99:.0f} "
          f"driver_bytes_per_record={drained.bytes_per_record:.1f} driver_cpu_growth={growth:.2f} "
          f"bad_record_cost_ratio={bad_ratio:.2f} aggregator_rps_finest={drained.rps_finest:.0f}")


if __name__ == "__main__":
    main()
