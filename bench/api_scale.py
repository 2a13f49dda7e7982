"""`bench/api.py --scale`: the REST API's cost per request at 1,000 topics x 10 partitions.

Redis is filled through the aggregator's own write path: raw-metrics records as the driver publishes them
(contract.records.raw_metrics' JSON, Kafka columns as Spark's source hands them) go through the map side
of a micro-batch (aggregator.partition_partials: parse, validity rules, partial windows, latest records)
and the sink (aggregator.redis_sink.RedisRollupSink.write: latest values, staged windows, merge into the
10 s / 1 min / 1 h windows), batch by batch, in event-time order, into a real redis-server. No Spark and
no Kafka: what they add is transport, and the keys they lead to are the same.

The fill: one replication (`east` -> `west`) of 1,000 topics x 10 partitions; 7 days of history (a
report per partition every `--history-step` hours, record and byte counts and replication latency, so
a topic's 7-day read meets one 1-h window per step) and the last `--recent` minutes at the default 30 s
metrics period with every partition metric (offsets, lag, lag in seconds), which the health rules read,
then (the fill takes minutes, and the status rules judge reports by their age) reports at the clock
until the newest is under a period old. Nothing is written during the load: keep `--duration` x 3
under ~80 s, or reports turn stale (UNKNOWN) and lagging partitions STOP, as when a driver stops.
A few topics' partitions fall behind more every period, so the lag evaluation has problems to list.

The service runs as deployed (`srm-service --config`, gunicorn, 2 sync workers), and each endpoint
gets a closed-loop load of its own (`--connections` keep-alive connections, `--duration` seconds):
- `/v2/cluster-info/west` (default range, 2 h at `auto`);
- `/v2/replications`;
- `/v2/topic-metrics/east/west/<random topic>/record_count` over the last 7 days at `auto`.
`service_rss_mb` is the largest peak RSS (VmHWM) of a gunicorn worker at the end. Last line:
`p99_ms_cluster_info=<ms> p99_ms_replications=<ms> p99_ms_topic_7d=<ms> service_rss_mb=<mb>`; targets
p99 <= 50 ms each and <= 300 MB per worker (reported, never asserted). Run it alone: flock /work/bench.lock.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import redis

from aggregator.partition_partials import PARTS_SCHEMA, PartitionPartials, collect
from aggregator.redis_sink import RedisRollupSink
from contract.replication_policy import metrics_topic
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.redis_server import RedisServer

SOURCE, TARGET = "east", "west"
TOPICS, PARTITIONS = 1_000, 10
PERIOD_MS = 30_000
HISTORY_DAYS = 7
LIVE_BATCHES = 3  # batches at the clock after the fill, to bring the newest report under a period old
LAGGING_TOPICS = 3  # topics whose partitions fall behind more every period (WARN in the lag evaluation)
TARGET_P99_MS, TARGET_RSS_MB = 50.0, 300.0
SEED = 11
HOUR_MS = 3_600_000

PARTITION_FULL = (
    '{"v":1,"kind":"partition","ts":%d,"period_ms":30000,"source":"east","target":"west",'
    '"topic":"east.t%04d","upstream_topic":"t%04d","partition":%d,"record_count":%d,"byte_count":%d,'
    '"replication_latency_ms":{"min":1,"max":%d,"avg":%d,"last":3,"count":%d},'
    '"record_age_ms":{"min":5,"max":%d,"avg":%d,"last":9,"count":%d},'
    '"records_lag":%d,"source_end_offset":%d,"upstream_offset":%d,"target_offset":%d}'
)
PARTITION_HISTORY = (
    '{"v":1,"kind":"partition","ts":%d,"period_ms":30000,"source":"east","target":"west",'
    '"topic":"east.t%04d","upstream_topic":"t%04d","partition":%d,"record_count":%d,"byte_count":%d,'
    '"replication_latency_ms":{"min":1,"max":%d,"avg":%d,"last":3,"count":%d}}'
)
REPLICATION = (
    '{"v":1,"kind":"replication","ts":%d,"period_ms":30000,"source":"east","target":"west",'
    '"status":"RUNNING","workers":2,"tasks":4,"last_heartbeat_ts":%d,"topics_replicated":%d,"enabled":true}'
)


def history_values(ts: int, rng: random.Random, topics: int = TOPICS) -> list[bytes]:
    out = []
    for topic in range(topics):
        for partition in range(PARTITIONS):
            count = rng.randint(0, 600)
            latency = rng.randint(3, 40)
            out.append((PARTITION_HISTORY % (ts, topic, topic, partition, count, count * 120, latency * 2,
                                             latency, count)).encode())
    return out


def recent_values(ts: int, period: int, rng: random.Random, topics: int = TOPICS) -> list[bytes]:
    """Every partition's full report for metrics period number `period` (0, 1, ...) at `ts`."""
    out = []
    for topic in range(topics):
        for partition in range(PARTITIONS):
            count = rng.randint(50, 600)
            end = 1_000_000 + period * 400 + topic * 7 + partition
            lag = 10 * (period + 1) if topic < LAGGING_TOPICS else rng.choice((0, 0, 0, 1, 3))
            latency = rng.randint(3, 40)
            fields = (ts, topic, topic, partition, count, count * 120, latency * 2, latency, count,
                      latency * 20, latency * 10, count, lag, end, end - lag, end - lag)
            out.append((PARTITION_FULL % fields).encode())
    out.append((REPLICATION % (ts, ts - 1_000, topics)).encode())
    return out


def kafka_columns(values: list[bytes], ts: int) -> pa.Table:
    """The Kafka rows of one batch as Spark's source gives them (aggregator.query.kafka_columns)."""
    return pa.table({"topic": [metrics_topic(SOURCE)] * len(values),
                     "partition": pa.array([0] * len(values), pa.int32()),
                     "offset": pa.array(range(len(values)), pa.int64()),
                     "kafka_ts": pa.array([ts] * len(values), pa.int64()),
                     "value": pa.array(values, pa.binary())})


def write_batch(sink: RedisRollupSink, values: list[bytes], ts: int, batch_id: int) -> None:
    """One micro-batch through the map side and the sink, as RedisRollupSink.__call__ runs it."""
    now_ms = int(time.time() * 1000)
    state = sink.state()
    mapper = PartitionPartials(TARGET, state.watermark_ms(sink.watermark_delay_ms, now_ms), now_ms)
    kafka = kafka_columns(values, ts)
    parts = pa.Table.from_batches(list(mapper(iter(kafka.to_batches()))), schema=PARTS_SCHEMA)
    sink.write(collect(parts).partials, batch_id, state)


def fill(url: str, now_ms: int, history_step_h: int, recent_min: int, topics: int = TOPICS) -> str:
    rng = random.Random(SEED)
    sink = RedisRollupSink(url, "bench-scale", target=TARGET)
    recent_periods = recent_min * 60_000 // PERIOD_MS
    recent_from = now_ms - recent_periods * PERIOD_MS
    history = list(range(recent_from - HISTORY_DAYS * 24 * HOUR_MS, recent_from - PERIOD_MS,
                         history_step_h * HOUR_MS))
    began, batch_id = time.monotonic(), 0
    for ts in history:
        write_batch(sink, history_values(ts, rng, topics), ts, batch_id)
        batch_id += 1
    history_s = time.monotonic() - began
    for period in range(recent_periods):
        ts = recent_from + (period + 1) * PERIOD_MS - 1_000
        write_batch(sink, recent_values(ts, period, rng, topics), ts, batch_id)
        batch_id += 1
    # The fill takes minutes, and the status rules judge reports by their age as they would a live
    # driver's: reports at the clock follow (a gap in the timeline), until the newest is under a period old.
    gap_s, period = (time.time() * 1000 - ts) / 1000, recent_periods
    for _ in range(LIVE_BATCHES):
        if time.time() * 1000 - ts < PERIOD_MS:
            break
        ts = int(time.time() * 1000) - 1_000
        write_batch(sink, recent_values(ts, period, rng, topics), ts, batch_id)
        batch_id, period = batch_id + 1, period + 1
    recent_s = time.monotonic() - began - history_s
    client = redis.Redis.from_url(url)
    memory = client.info("memory")["used_memory"] / 2**20
    keys = client.dbsize()
    client.close()
    sink.close()
    return (f"filled through the aggregator's writer: {len(history)} history batches of "
            f"{topics * PARTITIONS} reports in {history_s:.0f} s, {period} recent batches in "
            f"{recent_s:.0f} s ({recent_periods} 30 s apart, then {period - recent_periods} at the clock "
            f"after a {gap_s:.0f} s gap; the newest {time.time() - ts / 1000:.0f} s old); Redis holds {keys} "
            f"keys, {memory:.0f} MiB")


def cluster_info_paths(now_ms: int) -> list[str]:  # noqa: ARG001 (the default range ends now)
    return [f"/v2/cluster-info/{TARGET}"]


def replications_paths(now_ms: int) -> list[str]:  # noqa: ARG001
    return ["/v2/replications"]


def topic_7d_paths(now_ms: int, topics: int = TOPICS) -> list[str]:
    rng = random.Random(SEED + 1)
    week = HISTORY_DAYS * 24 * HOUR_MS
    return [f"/v2/topic-metrics/{SOURCE}/{TARGET}/t{rng.randrange(topics):04d}/record_count"
            f"?from={now_ms - week}&to={now_ms}&granularity=auto" for _ in range(500)]


def worker_peak_rss_mb(master_pid: int) -> float:
    """The largest peak RSS (VmHWM) among the gunicorn master's children (its workers)."""
    try:
        children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    except OSError:
        return float("nan")
    peaks = []
    for pid in children:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        peaks += [int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")]
    return max(peaks, default=float("nan"))


def run(args, run_python_load) -> int:  # noqa: ANN001 (bench/api.py's namespace and load generator)
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-api-scale-"))
    server = RedisServer(workdir / "redis").start()
    service = None
    try:
        now_ms = int(time.time() * 1000)
        print(fill(server.url, now_ms, args.history_step, args.recent, args.topics))
        port = free_port()
        props = srm_properties.write(
            workdir / "srm.properties", {SOURCE: "127.0.0.1:1", TARGET: "127.0.0.1:2"}, [(SOURCE, TARGET)],
            server.url,
            {"service.port": port, "service.workers": args.workers, "service.threads": args.threads,
             "service.target.clusters": "", "service.site": TARGET},
        )
        service = ManagedProcess.python_module("service", "service", ["--config", str(props)], workdir)
        service.start()
        try:
            wait_for_port(port, 60, service.process)
        except RuntimeError:
            print(service.log_file.read_text()[-3000:])
            raise
        print(f"load: Python generator, {args.connections} connections x {args.duration} s per endpoint, "
              f"{args.workers} workers x {args.threads} threads; load average before: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        figures = {}
        now_ms = int(time.time() * 1000)
        for name, paths in (("cluster_info", cluster_info_paths(now_ms)),
                            ("replications", replications_paths(now_ms)),
                            ("topic_7d", topic_7d_paths(now_ms, args.topics))):
            run_python_load(port, paths, args.connections, 2)  # warm-up: each worker's first answers
            rps, p50, p99 = run_python_load(port, paths, args.connections, args.duration)
            print(f"{name}: {rps:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
            figures[f"p99_ms_{name}"] = p99
        rss = worker_peak_rss_mb(service.process.pid)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        worst = max(figures.values())
        print(f"targets p99 <= {TARGET_P99_MS:g} ms, RSS <= {TARGET_RSS_MB:g} MB per worker: worst p99 ratio "
              f"{worst / TARGET_P99_MS:.2f}, RSS ratio {rss / TARGET_RSS_MB:.2f}")
        print(" ".join(f"{k}={v:.2f}" for k, v in figures.items()) + f" service_rss_mb={rss:.0f}")
        return 0
    finally:
        if service is not None:
            service.stop()
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
