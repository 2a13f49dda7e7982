"""Aggregator at the cardinality of a real target cluster: many series, each reporting once a period.

The runs of bench/rollup_runs.py (its docstring says how each is measured: throughput, driver load,
freshness, where the CPU goes) in this shape:
1. Throughput over --series (default 100,000) x --periods (default 16) reports, then over a tenth of the
   series with ten times the periods (the same records, the same records per batch).
2. Freshness at --rate records/s over --series series (100,000 series at 20,000 records/s: each series
   once every 5 s).
`driver_cpu_series_growth` = the driver's CPU per steady batch at --series over the same at a tenth of
them; `card_rss_mb` = the peak of the aggregator's whole process tree summed (driver, Spark JVM with its
executors, Python workers, the sink's children: process_cpu.TreeMemory) over the three runs.

Last line: `card_rps=<n> card_freshness_p50_ms=<ms> card_freshness_p99_ms=<ms> card_rss_mb=<mb>
driver_cpu_series_growth=<x>`; targets 40 000 records/s, p99 3 000 ms, 1 500 MB and growth 1.25, the
ratios to them on the line before. The aggregator's peak is near 11 GB: run it alone
(nothing else on the host). `bench/aggregator.py --cardinality` runs the same.
Usage: python bench/aggregator_cardinality.py [--series 100000] [--periods 16] [--rate 20000]
[--seconds 30] [--warm-up 15] [--max-offsets 200000] [--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rollup_runs import DriverLoad, add_run_options, bench_stack, freshness, percentiles, throughput

SERIES, PERIODS, FEWER = 100_000, 16, 10  # the default shape; the growth run's divisor of the series
TARGET_RPS, TARGET_P99_MS, TARGET_RSS_MB, TARGET_CPU_GROWTH = 40_000, 3_000, 1_500, 1.25


def run(args: argparse.Namespace) -> None:
    """The line over args' shape (--series, --periods, --rate, --seconds, --warm-up, --max-offsets,
    --spark-conf)."""
    with bench_stack(args.spark_conf, args.memory_timeline) as stack:
        stack.sampler.run(f"tput {args.series} series")
        drained = throughput(stack, "tput", args.series, args.periods, args.max_offsets)
        print(f"driver: RSS {DriverLoad.rss_mb('VmRSS'):.0f} MB, peak {DriverLoad.rss_mb():.0f} MB after "
              f"batches of {args.max_offsets} records")
        stack.sampler.run(f"tput1x {args.series // FEWER} series")
        fewer = throughput(stack, "tput1x", args.series // FEWER, args.periods * FEWER, args.max_offsets)
        growth = drained.cpu_per_batch_s / fewer.cpu_per_batch_s
        print(f"driver CPU per batch: {drained.cpu_per_batch_s * 1000:.0f} ms at {args.series} series, "
              f"{fewer.cpu_per_batch_s * 1000:.0f} ms at {args.series // FEWER}")
        stack.sampler.run(f"fresh {args.series} series")
        samples = freshness(stack, args.series, args.rate, args.seconds, args.warm_up)
        peak_mb = stack.tree_peak_mb()
    p50, p99 = percentiles(samples)
    print(f"ratio to targets: rps {drained.rps / TARGET_RPS:.2f}x of {TARGET_RPS}, "
          f"p99 {p99 / TARGET_P99_MS:.2f}x of {TARGET_P99_MS} ms ({len(samples)} samples), "
          f"rss {peak_mb / TARGET_RSS_MB:.2f}x of {TARGET_RSS_MB} MB, "
          f"series growth {growth / TARGET_CPU_GROWTH:.2f}x of {TARGET_CPU_GROWTH}")
    print(f"card_rps={drained.rps:.0f} card_freshness_p50_ms={p50:.0f} card_freshness_p99_ms={p99:.0f} "
          f"card_rss_mb={peak_mb:.0f} driver_cpu_series_growth={growth:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(parser, series=SERIES, periods=PERIODS)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
