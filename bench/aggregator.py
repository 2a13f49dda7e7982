"""Aggregator throughput, freshness and driver load on a real Kafka broker, Redis and local[2] Spark.

1. Throughput: S series x P periods of synthetic raw metrics are produced first, then one query
   drains them in batches of --max-offsets. A batch is done when its windows are merged in Redis (the
   applied batch id: aggregator.window_writer; the sink merges them before it returns, and before it
   had a child process for it, a batch or more behind the query), so: sustained raw records/s = rows of
   the batches after the warm-up ones / time from the first of them starting to the last one merged. The
   query's first batches (JVM warm-up, every series numbered and read) are left out; the last merge is
   counted. Before, the time ran from the merge of the last warm-up batch: a merge child that fell
   behind there and caught up by the end made that figure up to ~40 % too high.
2. Driver load, measured in the same run: `driver_bytes_per_record` is the Arrow bytes the driver process
   collects from Spark (every DataFrame.toArrow) per raw record read; the driver's CPU is this process (the
   Spark driver's Python side, where foreachBatch runs) plus its children (an aggregator before had a
   merge child), over the same span as the records/s, less the bench's own polling thread. The JVM is
   left out: in local[2] it hosts the executors too.
   `driver_cpu_growth` = CPU per batch of the throughput run / CPU per batch of a run with the same series,
   the same batch count and the same event-time span per batch, but a quarter of the records per series (a
   report every 4 periods instead of every period). The driver's peak RSS (VmHWM) is printed after the
   throughput run.
3. Freshness: records are produced live at RATE records/s (ts = now); a probe partition's latest
   value is polled in Redis, freshness = when its new `ts` became readable - that ts. The first
   --warm-up seconds of live input are not counted: the query's first batch with input starts the
   executors' Python workers and reads every series (3-4 s), and the input that
   piles up meanwhile took ~10 s to drain (before, a fifth of a 30 s run was skipped and the drain
   set the p99).
4. Where the CPU goes (bench/process_cpu.py): each part's CPU (the Spark JVM and its threads, the Python
   workers, the driver, Redis, the broker) per steady throughput batch and
   in cores over the measured freshness span: on 2 cores the parts compete, so the limiting stage is often
   the machine, not one part. The freshness line ends with the CPU the hypervisor gave other guests over
   the span (host steal): a run slowed by its host, not by its own parts, shows there.
Both inputs are produced by a process of its own (in_child): the bench's process is the Spark driver
and holds only what an aggregator holds.

5. Cardinality (`--cardinality`): the shape of a real target cluster, many series each reporting once a
   period. Throughput over --series (default 100,000) x --periods (default 16) reports, then over a tenth
   of the series with ten times the periods (the same records, the same records per batch), then
   freshness at --rate records/s over --series series (100,000 series at 20,000 records/s: each series
   once every 5 s). `driver_cpu_series_growth` = the driver's CPU per steady batch at --series over the
   same at a tenth of them; `card_rss_mb` = the peak of the aggregator's whole process tree summed
   (driver, Spark JVM with its executors, Python workers, the sink's children: process_cpu.TreeMemory)
   over the three runs.
6. Bad records (bad_record_cost): the executor's function on one task's 50k records with 5 % bad ones of
   mixed kinds, over the same batch clean, in CPU time (no Kafka or Spark; `--bad-records-only` runs
   only this).

Last line: `aggregator_rps=<n> freshness_p50_ms=<ms> freshness_p99_ms=<ms> driver_bytes_per_record=<b>
driver_cpu_growth=<x> bad_record_cost_ratio=<x>`; targets 100 000 records/s, p99 1 000 ms at 20 000
records/s, growth 1.25 and bad records 1.5, the ratios to them on the line before. With --cardinality:
`card_rps=<n> card_freshness_p50_ms=<ms> card_freshness_p99_ms=<ms> card_rss_mb=<mb>
driver_cpu_series_growth=<x>`; targets 40 000 records/s, p99 3 000 ms, 1 500 MB and growth 1.25. Run it
alone (/work/bin/run-bench, or flock on a lock file).
Usage: python bench/aggregator.py [--series 2000] [--periods 800] [--rate 20000] [--seconds 30]
[--warm-up 15] [--max-offsets 200000] [--skip-growth] [--cardinality] [--bad-records-only]
[--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import bisect
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from pyspark.sql.streaming import StreamingQuery

from aggregator.query import RollupQuerySpec, start_rollup_query
from aggregator.redis_sink import query_scope, windows_merged
from aggregator.session import build_session
from bench.process_cpu import (
    CLOCK_TICKS,
    HOST_STEAL,
    BenchThreads,
    CpuBudget,
    TreeMemory,
    budget_line,
    children,
    fixed_work_cpu_ms,
    ticks,
)
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics
from contract.replication_policy import metrics_topic
from stack.kafka_cluster import KafkaClusters
from stack.redis_server import RedisServer

LOG = logging.getLogger("bench.aggregator")
TARGET_RPS, TARGET_P99_MS, TARGET_CPU_GROWTH, TARGET_BAD_RATIO = 100_000, 1_000, 1.25, 1.5
CARD_SERIES, CARD_PERIODS, CARD_FEWER = 100_000, 16, 10  # the cardinality run; its growth run's divisor
CARD_RPS, CARD_P99_MS, CARD_RSS_MB = 40_000, 3_000, 1_500
GROWTH = 4  # records per series of the throughput run / of the growth baseline
WARM_UP_BATCHES = 2
TEMPLATE = ('{"v":1,"kind":"partition","ts":%d,"period_ms":1000,"source":"%s","target":"bench",'
            '"topic":"%s.t%d","upstream_topic":"t%d","partition":%d,"record_count":%d,"byte_count":%d,'
            '"replication_latency_ms":{"min":1,"max":9,"avg":4,"last":3,"count":%d},'
            '"records_lag":%d,"source_end_offset":%d,"upstream_offset":%d,"target_offset":%d}')


def record(source: str, series: int, ts: int, seq: int) -> bytes:
    topic, partition = divmod(series, 10)
    count = 1 + seq % 50
    end = seq * 50
    return (TEMPLATE % (ts, source, source, topic, topic, partition, count, count * 100, count, seq % 7, end,
                        end - seq % 7 - 1, end)).encode()


def record_key(source: str, series: int) -> bytes:
    """The driver's Kafka key for a series' records (its subject): a series stays in one partition, in
    order, as the driver publishes it. Unkeyed, the backlog's two partitions drifted apart in event time
    by up to minutes, and every batch then merged windows older than the merge keeps (read from Redis)."""
    topic, partition = divmod(series, 10)
    return PartitionMetrics(ts=0, period_ms=1000, source=source, target="bench", topic=f"{source}.t{topic}",
                            upstream_topic=f"t{topic}", partition=partition, record_count=0,
                            byte_count=0).key().encode()


def produce(producer: Producer, topic: str, payloads: list[tuple[bytes, bytes]]) -> None:
    for key, payload in payloads:
        while True:
            try:
                producer.produce(topic, value=payload, key=key)
                break
            except BufferError:
                producer.poll(0.05)
    producer.poll(0)


def in_child(produce_input, *args):
    """Runs a producer of the query's input in a process of its own and returns its answer: the Spark
    driver's process (whose CPU and RSS the bench reports) holds only what an aggregator holds, and the
    producer's loop does not take the driver's GIL while batches run."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(produce_input, args)


def produce_backlog(bootstrap: str, source: str, series: int, periods: int, every: int) -> None:
    """S series x P periods of reports (a report every `every` periods), ts one period apart, ending now."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "lz4"})
    # On a window boundary: each batch then spans the same windows, run after run.
    base = int(time.time() * 1000) // 10_000 * 10_000 - periods * 1000
    keys = [record_key(source, s) for s in range(series)]
    for p in range(0, periods, every):
        payloads = [(keys[s], record(source, s, base + p * 1000, p)) for s in range(series)]
        produce(producer, metrics_topic(source), payloads)
    if producer.flush(120):
        raise RuntimeError("the backlog was not all produced in 120 s")


def produce_live(bootstrap: str, source: str, series: int, rate: int, seconds: int
                 ) -> tuple[list[int], list[tuple[int, float]]]:
    """RATE records/s for SECONDS, ts = now, in ticks of 100 ms; the probe (series 0) reports each tick,
    the others fill up the rate round-robin. Returns the probe reports' ts, and each tick's time and the
    CPU ms of a fixed piece of work (process_cpu.fixed_work_cpu_ms) then."""
    keys = [record_key(source, s) for s in range(series)]
    topic = metrics_topic(source)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    began, sent, seq = time.time(), 0, 0
    produced_ts: list[int] = []
    host_speed: list[tuple[int, float]] = []
    while time.time() - began < seconds:
        tick = time.time()
        per_tick = rate // 10
        now_ms = int(tick * 1000)
        batch = [(keys[0], record(source, 0, now_ms, seq))]
        for i in range(per_tick - 1):
            s = 1 + (sent + i) % (series - 1)
            batch.append((keys[s], record(source, s, now_ms, seq)))
        produce(producer, topic, batch)
        produced_ts.append(now_ms)
        host_speed.append((now_ms, fixed_work_cpu_ms()))
        sent += per_tick
        seq += 1
        time.sleep(max(0.0, 0.1 - (time.time() - tick)))
    producer.flush(60)
    achieved = sent / (time.time() - began)
    print(f"freshness: produced {sent} records at {achieved:.0f} records/s, probe reports {len(produced_ts)}",
          flush=True)
    return produced_ts, host_speed


class DriverLoad:
    """What the driver process takes: Arrow bytes collected from Spark, and CPU (this process and its
    children but the JVM, less the bench's polling thread)."""

    collected_total = 0  # bytes of every table DataFrame.toArrow returned in this process

    def __init__(self) -> None:
        self._collected_before = DriverLoad.collected_total
        self.bench_threads = BenchThreads()  # the bench's threads, left out of the driver's CPU
        self._children: list[int] = []
        self._children_at = -1e9

    @property
    def collected_bytes(self) -> int:
        return DriverLoad.collected_total - self._collected_before

    @staticmethod
    def count_collected() -> None:
        """Counts what DataFrame.toArrow hands the driver (the sink's only way to take data from Spark,
        before and after the map side moved to the executors)."""
        original = ClassicDataFrame.toArrow

        def counted(frame: ClassicDataFrame) -> pa.Table:
            table = original(frame)
            DriverLoad.collected_total += table.nbytes
            return table

        # A deliberate patch of Spark's method, which mypy refuses (and misreads counted's self).
        ClassicDataFrame.toArrow = counted  # type: ignore[method-assign, assignment]

    def cpu_seconds(self) -> float:
        used = ticks(Path("/proc/self/stat")) - self.bench_threads.ticks()
        # The children (an older aggregator's merge child) are looked up once a second, not at every sample: a
        # scan of /proc took 1-2 ms, and the clock samples every 50 ms.
        if time.monotonic() - self._children_at > 1.0:
            self._children, self._children_at = children(os.getpid()), time.monotonic()
        return (used + sum(ticks(Path(f"/proc/{child}/stat")) for child in self._children)) / CLOCK_TICKS

    @staticmethod
    def rss_mb(field: str = "VmHWM", pid: int | str = "self") -> float:
        """A process's (the driver's by default) peak (VmHWM) or current (VmRSS) resident memory."""
        status = Path(f"/proc/{pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith(f"{field}:"))
        return int(line.split()[1]) / 1024


class MergeClock:
    """When the query's applied batch id (aggregator.window_writer) reached each value, polled, and the
    driver's CPU then; the driver's CPU every CPU_EVERY_S too."""

    CPU_EVERY_S = 0.05

    def __init__(self, client: redis.Redis, query: StreamingQuery, load: DriverLoad) -> None:
        self.key = layout.applied_batch_key(query_scope(query.name, str(query.id)))
        self.client = client
        self.load = load
        self.seen: list[tuple[float, int, float]] = []
        self.cpu: list[tuple[float, float]] = []  # (time, driver CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        tid = threading.get_native_id()
        self.load.bench_threads.tids.add(tid)
        try:
            while not self._stop.is_set():
                raw = cast(bytes | None, self.client.get(self.key))
                if raw is not None and (not self.seen or int(raw) != self.seen[-1][1]):
                    self.seen.append((time.time(), int(raw), self.load.cpu_seconds()))
                if not self.cpu or time.time() - self.cpu[-1][0] >= self.CPU_EVERY_S:
                    self.cpu.append((time.time(), self.load.cpu_seconds()))
                time.sleep(0.005)
        finally:
            self.load.bench_threads.tids.discard(tid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_at(self, at: float) -> float:
        """The driver's CPU s at the last sample taken at or before `at`."""
        return self.cpu[max(0, bisect.bisect_right([t for t, _ in self.cpu], at) - 1)][1]

    def first(self, at_least: int) -> tuple[float, int, float]:
        """(time, applied id, driver CPU s) of the first merge that took the applied id to `at_least` or
        beyond."""
        return next(seen for seen in self.seen if seen[1] >= at_least)


@dataclass
class Drained:
    rps: float
    cpu_per_batch_s: float
    bytes_per_record: float
    rows: int


def throughput(spark, bootstrap: str, redis_url: str, work: Path, source: str, series: int, periods: int,
               max_offsets: int, every: int = 1) -> Drained:
    """Drains S series x P periods (a report every `every` periods) in batches of `max_offsets`."""
    load = DriverLoad()
    in_child(produce_backlog, bootstrap, source, series, periods, every)
    query = start_rollup_query(spark, RollupQuerySpec(
        target="bench", bootstrap_servers=bootstrap, redis_url=redis_url, checkpoint_dir=str(work / source),
        trigger_interval="100 milliseconds", watermark_delay_ms=3_600_000,
        max_offsets_per_trigger=max_offsets,
        topics_pattern=metrics_topic(source).replace(".", r"\.")))
    client = redis.Redis.from_url(redis_url)
    budget = CpuBudget()
    budget.bench_threads = load.bench_threads  # one account of the bench's threads for both clocks
    budget.start()
    merges = MergeClock(client, query, load)
    try:
        query.processAllAvailable()
        while not windows_merged(client, query.name, str(query.id)):
            time.sleep(0.01)
        time.sleep(0.1)  # the clock sees the last merge
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        merges.stop()
        budget.stop()
        query.stop()
    rows = sum(p["numInputRows"] for p in batches)
    # Warm-up, reported apart: the first batch pays for JVM code warm-up and for numbering and reading
    # every series.
    steady = batches[WARM_UP_BATCHES:] or batches
    began = datetime.fromisoformat(steady[0]["timestamp"]).timestamp()
    for p in batches:
        LOG.info("batch %s: %d rows in %d ms (%s)", p["batchId"], p["numInputRows"],
                 p["durationMs"]["triggerExecution"], {k: v for k, v in p["durationMs"].items()
                                                         if k in ("addBatch", "getBatch", "latestOffset",
                                                                  "queryPlanning", "walCommit")})
    steady_rows = sum(p["numInputRows"] for p in steady)
    bytes_per_record = load.collected_bytes / max(rows, 1)
    ended, last, cpu_ended = merges.first(int(batches[-1]["batchId"]))
    seconds = ended - began
    timeline = ", ".join(f"{batch_id} at {t - began:+.1f} s" for t, batch_id, _ in merges.seen)
    print(f"{source}: {rows} rows in {len(batches)} batches; windows merged up to batch {timeline} (from "
          f"batch {steady[0]['batchId']}'s start)")
    if len(batches) <= WARM_UP_BATCHES:  # too few batches for a steady state
        return Drained(steady_rows / seconds, float("nan"), bytes_per_record, rows)
    cpu_per_batch = (cpu_ended - merges.cpu_at(began)) / len(steady)
    # The method before (from the last warm-up batch's merge), for comparison only: see the docstring.
    since, first, _ = merges.first(WARM_UP_BATCHES - 1)
    merged_rows = sum(p["numInputRows"] for p in batches if first < int(p["batchId"]) <= last)
    # Batches that come close together are merged as one: the warm-up's merge can be the last one.
    between = f"{merged_rows / (ended - since):.0f} rows/s" if ended > since else "merged as one"
    print(f"{source}: batches {steady[0]['batchId']}..{last}: {steady_rows} rows from the first's start to "
          f"the last's merge in {seconds:.1f} s: {steady_rows / seconds:.0f} rows/s sustained (between the "
          f"merges of batch {first} and {last}: {between}); driver CPU "
          f"{cpu_per_batch * 1000:.0f} ms per batch, {load.collected_bytes / 1e6:.1f} MB collected "
          f"({bytes_per_record:.1f} B per record)")
    print(f"{source}: CPU s per batch over the same span, by part: "
          f"{budget_line(budget.between(began, ended), len(steady), 'CPU s')}")
    return Drained(steady_rows / seconds, cpu_per_batch, bytes_per_record, rows)


def freshness(spark, bootstrap: str, redis_url: str, work: Path, series: int, rate: int,
              seconds: int, warm_up_s: int) -> list[float]:
    source = "fresh"
    topic = metrics_topic(source)
    query = start_rollup_query(spark, RollupQuerySpec(
        target="bench", bootstrap_servers=bootstrap, redis_url=redis_url, checkpoint_dir=str(work / "fresh"),
        trigger_interval="200 milliseconds", watermark_delay_ms=10_000,
        topics_pattern=topic.replace(".", r"\.")))
    client = redis.Redis.from_url(redis_url)
    probe_key = layout.partition_latest_key("bench", source, f"{source}.t0")
    seen: dict[int, float] = {}
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            raw = cast(bytes | None, client.hget(probe_key, "0"))
            if raw is not None:
                ts = int(layout.decode_latest(raw)["ts"])
                seen.setdefault(ts, time.time() * 1000)
            time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    budget = CpuBudget()
    try:
        time.sleep(5)  # let the query start before timing anything
        poller.start()
        budget.bench_threads.tids.add(poller.native_id or 0)
        budget.start()
        produced_ts, host_speed = in_child(produce_live, bootstrap, source, series, rate, warm_up_s + seconds)
        time.sleep(5)
    finally:
        stop.set()
        budget.stop()
        query.stop()
    measured = (produced_ts[0] / 1000 + warm_up_s, produced_ts[-1] / 1000)
    used = budget.between(*measured)
    print(f"freshness: cores used while measured, by part: "
          f"{budget_line(used, measured[1] - measured[0], 'cores')}; host steal "
          f"{used.get(HOST_STEAL, 0.0) / (measured[1] - measured[0]):.2f} cores")
    work_ms = sorted(ms for at, ms in host_speed if at >= measured[0] * 1000)
    if work_ms:  # none when nothing was measured past the warm-up (--seconds 0)
        print(f"freshness: a fixed piece of Python work took {statistics.median(work_ms):.2f} ms of CPU at "
              f"the median over the same span, {work_ms[int(len(work_ms) * 0.9)]:.2f} at p90 (more when the "
              f"host runs code slower)")
    warm = [ts for ts in produced_ts if ts >= produced_ts[0] + warm_up_s * 1000]
    gave_up = time.time() * 1000
    # A report is readable once it or any newer one is: one batch may carry several probe reports.
    observed = sorted(seen.items())
    observed_ts = [ts for ts, _ in observed]
    readable_at = []
    for ts in warm:
        i = bisect.bisect_left(observed_ts, ts)
        readable_at.append(min((at for _, at in observed[i:]), default=None))
    missing = sum(1 for at in readable_at if at is None)
    if missing:  # never readable before the query stopped: freshness is at least this long
        print(f"freshness: {missing} of {len(warm)} probe reports never readable; counted as lower bounds")
    return [(gave_up if at is None else at) - ts for ts, at in zip(warm, readable_at, strict=True)]


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
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--periods", type=int, default=800)  # 1.6M records: 6 steady batches of 200k
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=30, help="freshness: seconds measured")
    parser.add_argument("--warm-up", type=int, default=15, help="freshness: seconds of input not counted")
    # Redis work per batch grows with the series x windows it touches, not with its records: a backlog
    # is drained fastest in large batches. The default is the aggregator's own
    # (aggregator.max.offsets.per.trigger).
    parser.add_argument("--max-offsets", type=int, default=200_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--skip-growth", action="store_true", help="no growth baseline run")
    parser.add_argument("--cardinality", action="store_true",
                        help="many series reporting once a period (default 100,000 x 16; see the docstring)")
    parser.add_argument("--bad-records-only", action="store_true",
                        help="only bad_record_cost_ratio (no Kafka, Spark or Redis)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting over the aggregator's own (e.g. spark.driver.memory=512m)")
    args = parser.parse_args()
    spark_conf = dict(c.split("=", 1) for c in args.spark_conf)
    bad_ratio = bad_record_cost(50_000, 0.05, 9)
    if args.bad_records_only:
        print(f"ratio to target: {bad_ratio / TARGET_BAD_RATIO:.2f}x of {TARGET_BAD_RATIO}")
        print(f"bad_record_cost_ratio={bad_ratio:.2f}")
        return
    if args.cardinality:
        defaults = parser.parse_args([])
        args.series = CARD_SERIES if args.series == defaults.series else args.series
        args.periods = CARD_PERIODS if args.periods == defaults.periods else args.periods
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    LOG.setLevel(logging.INFO)
    for stage in ("aggregator.redis_sink", "aggregator.window_writer"):  # where a batch's time goes
        logging.getLogger(stage).setLevel(logging.DEBUG)
    work = Path(tempfile.mkdtemp(prefix="srm-bench-aggregator-"))
    clusters, server = KafkaClusters(["bench"], work / "kafka"), RedisServer(work / "redis")
    growth = float("nan")
    try:
        clusters.start()
        server.start()
        bootstrap = clusters.bootstrap("bench")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for source in ("tput", "tput1x", "fresh"):
            admin.create_topics([NewTopic(metrics_topic(source), 2, 1)])[metrics_topic(source)].result(30)
        spark = build_session("local[2]", "srm-bench-aggregator", spark_conf)
        DriverLoad.count_collected()
        memory = TreeMemory().start()
        drained = throughput(spark, bootstrap, server.url, work, "tput", args.series, args.periods,
                             args.max_offsets)
        print(f"driver: RSS {DriverLoad.rss_mb('VmRSS'):.0f} MB, peak {DriverLoad.rss_mb():.0f} MB after "
              f"batches of {args.max_offsets} records")
        if args.cardinality:
            fewer = throughput(spark, bootstrap, server.url, work, "tput1x", args.series // CARD_FEWER,
                               args.periods * CARD_FEWER, args.max_offsets)
            growth = drained.cpu_per_batch_s / fewer.cpu_per_batch_s
            print(f"driver CPU per batch: {drained.cpu_per_batch_s * 1000:.0f} ms at {args.series} series, "
                  f"{fewer.cpu_per_batch_s * 1000:.0f} ms at {args.series // CARD_FEWER}")
        elif not args.skip_growth:
            baseline = throughput(spark, bootstrap, server.url, work, "tput1x", args.series, args.periods,
                                  args.max_offsets // GROWTH, every=GROWTH)
            growth = drained.cpu_per_batch_s / baseline.cpu_per_batch_s
            print(f"driver CPU per batch: {drained.cpu_per_batch_s * 1000:.0f} ms at {GROWTH}x records per "
                  f"series, {baseline.cpu_per_batch_s * 1000:.0f} ms at 1x")
        samples = freshness(spark, bootstrap, server.url, work, args.series, args.rate, args.seconds,
                            args.warm_up)
        memory.stop()
        shares = ", ".join(f"{part} {mb:.0f}" for part, mb in sorted(memory.peak_parts.items(),
                                                                       key=lambda item: -item[1]))
        print(f"aggregator process tree: peak RSS {memory.peak_mb:.0f} MB ({shares})")
        spark.stop()
    finally:
        server.cleanup()
        clusters.cleanup()
    if not samples:
        raise SystemExit("no freshness samples: the probe's latest value never appeared in Redis")
    cuts = statistics.quantiles(samples, n=100)
    p50, p99 = statistics.median(samples), cuts[98]
    if args.cardinality:
        print(f"ratio to targets: rps {drained.rps / CARD_RPS:.2f}x of {CARD_RPS}, "
              f"p99 {p99 / CARD_P99_MS:.2f}x of {CARD_P99_MS} ms ({len(samples)} samples), "
              f"rss {memory.peak_mb / CARD_RSS_MB:.2f}x of {CARD_RSS_MB} MB, "
              f"series growth {growth / TARGET_CPU_GROWTH:.2f}x of {TARGET_CPU_GROWTH}")
        print(f"card_rps={drained.rps:.0f} card_freshness_p50_ms={p50:.0f} card_freshness_p99_ms={p99:.0f} "
              f"card_rss_mb={memory.peak_mb:.0f} driver_cpu_series_growth={growth:.2f}")
        return
    print(f"ratio to targets: rps {drained.rps / TARGET_RPS:.2f}x of {TARGET_RPS}, "
          f"p99 {p99 / TARGET_P99_MS:.2f}x of {TARGET_P99_MS} ms ({len(samples)} samples), "
          f"cpu growth {growth / TARGET_CPU_GROWTH:.2f}x of {TARGET_CPU_GROWTH}, "
          f"bad record cost {bad_ratio / TARGET_BAD_RATIO:.2f}x of {TARGET_BAD_RATIO}")
    print(f"aggregator_rps={drained.rps:.0f} freshness_p50_ms={p50:.0f} freshness_p99_ms={p99:.0f} "
          f"driver_bytes_per_record={drained.bytes_per_record:.1f} driver_cpu_growth={growth:.2f} "
          f"bad_record_cost_ratio={bad_ratio:.2f}")


if __name__ == "__main__":
    main()
