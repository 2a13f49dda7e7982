"""The runs both aggregator benches are made of (bench/aggregator.py, the default line, and
bench/aggregator_cardinality.py, many series): one rollup query on a real Kafka broker, Redis and
local[2] Spark, the Spark driver being the bench's own process.

1. Throughput (`throughput`): S series x P periods of synthetic raw metrics are produced first, then one
   query drains them in batches of --max-offsets. A batch is done when its windows are merged in Redis
   (the applied batch id: aggregator.window_writer; the sink merges them before it returns, and before it
   had a child process for it, a batch or more behind the query), so: sustained raw records/s = rows of
   the batches after the warm-up ones / time from the first of them starting to the last one merged. The
   query's first batches (JVM warm-up, every series numbered and read) are left out; the last merge is
   counted. Before, the time ran from the merge of the last warm-up batch: a merge child that fell
   behind there and caught up by the end made that figure up to ~40 % too high. The same to the last
   batch's 10 s windows merged (`rps_finest`) is printed beside: the merge thread merges the 1 min / 1 h
   windows at every third merge, and with no batch waiting once no batch has come for 10 s
   (merge_thread.QUIET_S), so the every-size end of a drain waits up to ~10 s by design, not for work.
2. Driver load, measured in the same run (`DriverLoad`): the Arrow bytes the driver process collects from
   Spark (every DataFrame.toArrow) per raw record read; the driver's CPU is this process (the Spark
   driver's Python side, where foreachBatch runs) plus its children (an aggregator before had a merge
   child) but the bench's sampler, over the same span as the records/s. The JVM is left out: in local[2]
   it hosts the executors too. So is Redis: the bench starts its redis-server from this process, and until
   2026-11-29 (s32) the driver's CPU, and so `driver_cpu_series_growth`, counted that server's own CPU
   (not its AOF rewrites) as the driver's: at 100,000 series ~2-3.5 of the 5.6-9.1 CPU s a batch
   it printed that morning.
3. Freshness (`freshness`): records are produced live at RATE records/s (ts = now); a probe partition's
   latest value is polled in Redis, freshness = when its new `ts` became readable - that ts. The first
   --warm-up seconds of live input are not counted: the query's first batch with input starts the
   executors' Python workers and reads every series (3-4 s), and the input that
   piles up meanwhile took ~10 s to drain (before, a fifth of a 30 s run was skipped and the drain
   set the p99).
4. Where the CPU goes (bench/process_cpu.py): each part's CPU (the Spark JVM and its threads, the Python
   workers, the driver, Redis, the broker) per steady throughput batch and
   in cores over the measured freshness span: on 2 cores the parts compete, so the limiting stage is often
   the machine, not one part. The freshness line ends with the CPU the hypervisor gave other guests over
   the span (host steal): a run slowed by its host, not by its own parts, shows there.
Both inputs are produced by a process of its own (in_child), and everything the bench samples (merge
times, the probe's value, CPU by part, memory) is sampled by one more (bench/sampler.py): the bench's
process is the Spark driver and runs only what an aggregator runs, but for one thread that reads its
Arrow pool once a second. Until 2026-11-29 the sampling ran in threads of the driver, which took the
GIL from the threads they measured at 100,000 series (their CPU was left out of the driver's figure).
"""

from __future__ import annotations

import argparse
import bisect
import logging
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Self, cast

import pyarrow as pa
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from pyspark.sql.streaming import StreamingQuery

from aggregator.query import RollupQuerySpec, start_rollup_query
from aggregator.redis_sink import query_scope, windows_merged
from aggregator.session import build_session
from bench.process_cpu import (
    CLOCK_TICKS,
    HOST_STEAL,
    SAMPLER,
    CpuBudget,
    Sampling,
    budget_line,
    children,
    fixed_work_cpu_ms,
    ticks,
)
from bench.sampler import Sampler
from contract import redis_layout as layout
from contract.records.raw_metrics import PartitionMetrics
from contract.replication_policy import metrics_topic
from stack.kafka_cluster import KafkaClusters
from stack.redis_server import RedisServer

LOG = logging.getLogger("bench.aggregator")
WARM_UP_BATCHES = 2
SOURCES = ("tput", "tput1x", "fresh")  # the throughput run's, its baseline's and the freshness run's


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
    """The driver's Kafka key for a series' records (its topic partition's): a series stays in one
    partition, in order, as the driver publishes it. Unkeyed, the backlog's two partitions drifted apart
    in event time by up to minutes, and every batch then merged windows older than the merge keeps (read
    from Redis)."""
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
    """What the driver process takes: Arrow bytes collected from Spark (its CPU: MergeClock)."""

    collected_total = 0  # bytes of every table DataFrame.toArrow returned in this process

    def __init__(self) -> None:
        self._collected_before = DriverLoad.collected_total

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

    @staticmethod
    def rss_mb(field: str = "VmHWM", pid: int | str = "self") -> float:
        """A process's (the driver's by default) peak (VmHWM) or current (VmRSS) resident memory."""
        status = Path(f"/proc/{pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith(f"{field}:"))
        return int(line.split()[1]) / 1024


class MergeClock(Sampling):
    """When the query's applied batch id (aggregator.window_writer: merged at every size) reached each
    value, polled every EVERY_S, and the driver's CPU then; when the batch merged at the finest size (10 s
    windows) did; the driver's CPU every CPU_EVERY_S too. Made in the driver (its pid is the driver's),
    run by the bench's sampler."""

    EVERY_S = 0.005
    CPU_EVERY_S = 0.05
    RUNTIME = (*Sampling.RUNTIME, "_client", "_children", "_children_at")

    def __init__(self, redis_url: str, query: StreamingQuery) -> None:
        scope = query_scope(query.name, str(query.id))
        self.key, self.finest_key = layout.applied_batch_key(scope), layout.finest_applied_batch_key(scope)
        self.redis_url = redis_url
        self.driver = os.getpid()
        self.seen: list[tuple[float, int, float]] = []
        self.finest_seen: list[tuple[float, int]] = []
        self.cpu: list[tuple[float, float]] = []  # (time, driver CPU s)

    def start(self) -> Self:
        self._client = redis.Redis.from_url(self.redis_url)
        self._children: list[int] = []
        self._children_at = -1e9
        return super().start()

    def take(self) -> None:
        raw, finest = cast(list[bytes | None], self._client.mget(self.key, self.finest_key))
        if raw is not None and (not self.seen or int(raw) != self.seen[-1][1]):
            self.seen.append((time.time(), int(raw), self.driver_cpu_s()))
        # Absent, the finest size is where every size is (window_writer._applied).
        merged = max((int(v) for v in (raw, finest) if v is not None), default=None)
        if merged is not None and (not self.finest_seen or merged != self.finest_seen[-1][1]):
            self.finest_seen.append((time.time(), merged))
        if not self.cpu or time.time() - self.cpu[-1][0] >= self.CPU_EVERY_S:
            self.cpu.append((time.time(), self.driver_cpu_s()))

    def driver_cpu_s(self) -> float:
        """The driver's CPU s: the process and its children (process_cpu.children: not the JVM, Redis or the
        bench's sampler)."""
        used = ticks(Path(f"/proc/{self.driver}/stat"))
        # The children (an older aggregator's merge child) are looked up once a second, not at every sample: a
        # scan of /proc took 1-2 ms, and the clock samples every 50 ms.
        if time.monotonic() - self._children_at > 1.0:
            self._children, self._children_at = children(self.driver), time.monotonic()
        return (used + sum(ticks(Path(f"/proc/{child}/stat")) for child in self._children)) / CLOCK_TICKS

    def cpu_at(self, at: float) -> float:
        """The driver's CPU s at the last sample taken at or before `at`."""
        return self.cpu[max(0, bisect.bisect_right([t for t, _ in self.cpu], at) - 1)][1]

    def first(self, at_least: int) -> tuple[float, int, float]:
        """(time, applied id, driver CPU s) of the first merge that took the applied id to `at_least` or
        beyond."""
        return next(seen for seen in self.seen if seen[1] >= at_least)

    def finest(self, at_least: int) -> float:
        """When a merge first took the batch merged at the finest size to `at_least` or beyond."""
        return next(t for t, merged in self.finest_seen if merged >= at_least)


class LatestClock(Sampling):
    """When each `ts` of a latest value (`field` of the hash `key`) was first readable in Redis (ms),
    polled every EVERY_S by the bench's sampler."""

    EVERY_S = 0.01
    RUNTIME = (*Sampling.RUNTIME, "_client")

    def __init__(self, redis_url: str, key: str, field: str) -> None:
        self.redis_url, self.key, self.field = redis_url, key, field
        self.seen: dict[int, float] = {}

    def start(self) -> Self:
        self._client = redis.Redis.from_url(self.redis_url)
        return super().start()

    def take(self) -> None:
        raw = cast(bytes | None, self._client.hget(self.key, self.field))
        if raw is not None:
            self.seen.setdefault(int(layout.decode_latest(raw)["ts"]), time.time() * 1000)


@dataclass
class Drained:
    rps: float  # to the last batch's windows merged at every size
    cpu_per_batch_s: float
    bytes_per_record: float
    rows: int
    rps_finest: float = float("nan")  # to its 10 s windows merged (and its latest values written before)


def throughput(stack: BenchStack, source: str, series: int, periods: int, max_offsets: int,
               every: int = 1) -> Drained:
    """Drains S series x P periods (a report every `every` periods) in batches of `max_offsets`."""
    load = DriverLoad()
    in_child(produce_backlog, stack.bootstrap, source, series, periods, every)
    query = start_rollup_query(stack.spark, RollupQuerySpec(
        target="bench", bootstrap_servers=stack.bootstrap, redis_url=stack.redis_url,
        checkpoint_dir=str(stack.work / source), trigger_interval="100 milliseconds",
        watermark_delay_ms=3_600_000, max_offsets_per_trigger=max_offsets,
        topics_pattern=metrics_topic(source).replace(".", r"\.")))
    client = redis.Redis.from_url(stack.redis_url)
    try:
        with stack.sampler.watching(merges=MergeClock(stack.redis_url, query), cpu=CpuBudget()) as watched:
            query.processAllAvailable()
            # Only to know when to stop: the time of the last merge is the sampler's.
            while not windows_merged(client, query.name, str(query.id)):
                time.sleep(0.1)
            time.sleep(0.1)  # the clock sees the last merge
            batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    merges, budget = cast(MergeClock, watched["merges"]), cast(CpuBudget, watched["cpu"])
    rows = sum(p["numInputRows"] for p in batches)
    # Warm-up, reported apart: the first batch pays for JVM code warm-up and for numbering and reading
    # every series.
    steady = batches[WARM_UP_BATCHES:] or batches
    began = datetime.fromisoformat(steady[0]["timestamp"]).timestamp()
    log_batches(batches)
    steady_rows = sum(p["numInputRows"] for p in steady)
    bytes_per_record = load.collected_bytes / max(rows, 1)
    ended, last, cpu_ended = merges.first(int(batches[-1]["batchId"]))
    seconds = ended - began
    finest_seconds = merges.finest(int(batches[-1]["batchId"])) - began
    timeline = ", ".join(f"{batch_id} at {t - began:+.1f} s" for t, batch_id, _ in merges.seen)
    finest_timeline = ", ".join(f"{batch_id} at {t - began:+.1f} s" for t, batch_id in merges.finest_seen)
    print(f"{source}: {rows} rows in {len(batches)} batches; windows merged at every size up to batch "
          f"{timeline}; at the finest size up to batch {finest_timeline} (from batch "
          f"{steady[0]['batchId']}'s start)")
    finest_rps = steady_rows / finest_seconds
    print(f"{source}: to the finest size: {steady_rows} rows in {finest_seconds:.1f} s, {finest_rps:.0f} "
          f"rows/s; to every size {seconds:.1f} s")
    if len(batches) <= WARM_UP_BATCHES:  # too few batches for a steady state
        return Drained(steady_rows / seconds, float("nan"), bytes_per_record, rows, finest_rps)
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
    used = budget.between(began, ended)
    print(f"{source}: CPU s per batch over the same span, by part: "
          f"{budget_line(used, len(steady), 'CPU s')}; the bench's sampler (in none) "
          f"{used.get(SAMPLER, 0.0) / len(steady):.2f}")
    return Drained(steady_rows / seconds, cpu_per_batch, bytes_per_record, rows, finest_rps)


def log_batches(batches: Sequence[Mapping[str, Any]]) -> None:
    """Each batch's rows and where its trigger's time went (Spark's progress: the sink is `addBatch`; what
    is outside it, the source's offsets, planning and the checkpoint's two logs, is the rest)."""
    for p in batches:
        durations = dict(p["durationMs"])
        LOG.info("batch %s: %d rows in %d ms (%s)", p["batchId"], p["numInputRows"],
                 durations.pop("triggerExecution", -1), durations)


def freshness(stack: BenchStack, series: int, rate: int, seconds: int, warm_up_s: int) -> list[float]:
    source = "fresh"
    topic = metrics_topic(source)
    query = start_rollup_query(stack.spark, RollupQuerySpec(
        target="bench", bootstrap_servers=stack.bootstrap, redis_url=stack.redis_url,
        checkpoint_dir=str(stack.work / "fresh"), trigger_interval="200 milliseconds",
        watermark_delay_ms=10_000, topics_pattern=topic.replace(".", r"\.")))
    probe = LatestClock(stack.redis_url, layout.partition_latest_key("bench", source, f"{source}.t0"), "0")
    try:
        time.sleep(5)  # let the query start before timing anything
        with stack.sampler.watching(probe=probe, cpu=CpuBudget()) as watched:
            produced_ts, host_speed = in_child(produce_live, stack.bootstrap, source, series, rate,
                                               warm_up_s + seconds)
            time.sleep(5)
    finally:
        query.stop()
    log_batches([p for p in query.recentProgress if p["numInputRows"] > 0])
    seen, budget = cast(LatestClock, watched["probe"]).seen, cast(CpuBudget, watched["cpu"])
    measured = (produced_ts[0] / 1000 + warm_up_s, produced_ts[-1] / 1000)
    used = budget.between(*measured)
    span = measured[1] - measured[0]
    print(f"freshness: cores used while measured, by part: {budget_line(used, span, 'cores')}; host steal "
          f"{used.get(HOST_STEAL, 0.0) / span:.2f} cores; the bench's sampler (in none) "
          f"{used.get(SAMPLER, 0.0) / span:.2f} cores")
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


def add_run_options(parser: argparse.ArgumentParser, series: int, periods: int) -> None:
    """The options both benches take, with each bench's default shape."""
    parser.add_argument("--series", type=int, default=series)
    parser.add_argument("--periods", type=int, default=periods)
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=30, help="freshness: seconds measured")
    parser.add_argument("--warm-up", type=int, default=15, help="freshness: seconds of input not counted")
    # Redis work per batch grows with the series x windows it touches, not with its records: a backlog
    # is drained fastest in large batches. The default is the aggregator's own
    # (aggregator.max.offsets.per.trigger).
    parser.add_argument("--max-offsets", type=int, default=200_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting over the aggregator's own (e.g. spark.driver.memory=512m)")
    parser.add_argument("--memory-timeline", type=Path, metavar="FILE",
                        help="write every sample of the aggregator's process tree's memory to FILE")


@dataclass
class BenchStack:
    """What a bench's runs run on: one broker with the runs' input topics, Redis, the SparkSession, and
    the bench's sampler (bench/sampler.py), which measures the aggregator's process tree from the
    session's start."""

    spark: SparkSession
    bootstrap: str
    redis_url: str
    work: Path
    sampler: Sampler

    def tree_peak_mb(self) -> float:
        """Stops measuring the process tree; prints and returns its peak (summed over its processes), and
        each run's peak by part."""
        memory = self.sampler.close()
        shares = ", ".join(f"{part} {mb:.0f}" for part, mb in sorted(memory.peak_parts.items(),
                                                                       key=lambda item: -item[1]))
        print(f"aggregator process tree: peak RSS {memory.peak_mb:.0f} MB ({shares})")
        for name, peak in memory.runs.items():
            print(f"aggregator process tree, {name}: {peak.line()}")
        return memory.peak_mb


@contextmanager
def bench_stack(spark_conf: list[str], memory_timeline: Path | None = None) -> Iterator[BenchStack]:
    """Starts a broker, Redis and Spark (the --spark-conf KEY=VALUE settings over the aggregator's own)
    for one bench; stops Spark when the bench's runs are done and removes everything, whatever happens.
    `memory_timeline`: a file to write the process tree's every memory sample to."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    LOG.setLevel(logging.INFO)
    for stage in ("aggregator.redis_sink", "aggregator.window_writer"):  # where a batch's time goes
        logging.getLogger(stage).setLevel(logging.DEBUG)
    work = Path(tempfile.mkdtemp(prefix="srm-bench-aggregator-"))
    clusters, server = KafkaClusters(["bench"], work / "kafka"), RedisServer(work / "redis")
    try:
        clusters.start()
        server.start()
        bootstrap = clusters.bootstrap("bench")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for source in SOURCES:
            admin.create_topics([NewTopic(metrics_topic(source), 2, 1)])[metrics_topic(source)].result(30)
        spark = build_session("local[2]", "srm-bench-aggregator", dict(c.split("=", 1) for c in spark_conf))
        DriverLoad.count_collected()
        with Sampler(spark, memory_timeline) as sampler:
            yield BenchStack(spark, bootstrap, server.url, work, sampler)
        spark.stop()
    finally:
        server.cleanup()
        clusters.cleanup()


def percentiles(samples: list[float]) -> tuple[float, float]:
    """Freshness p50 and p99 (ms); a bench without samples ends with a clear error."""
    if not samples:
        raise SystemExit("no freshness samples: the probe's latest value never appeared in Redis")
    return statistics.median(samples), statistics.quantiles(samples, n=100)[98]
