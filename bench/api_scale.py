"""`bench/api.py --scale`: the REST API's cost per request at 1,000 topics x 10 partitions.

Redis is filled through the aggregator's own write path: raw-metrics records as the driver publishes them
(contract.records.raw_metrics' JSON, Kafka columns as Spark's source hands them) go through the map side
of a micro-batch (aggregator.partition_partials: parse, validity rules, partial windows, latest records)
and the sink (aggregator.redis_sink.RedisRollupSink.write: latest values, staged windows, merge into the
10 s / 1 min / 1 h windows), batch by batch, in event-time order, into a real redis-server. No Spark and
no Kafka: what they add is transport, and the keys they lead to are the same.

The fill: one replication (`east` -> `west`) of 1,000 topics x 10 partitions; 7 days of history (a
report per partition every `--history-step` hours, record and byte counts and replication latency, so
a topic's 7-day read meets one 1-h window per step), then 2 h of a few partitions' reports every period
(the replication-level 10 s windows cluster-info's default range reads, as a full fill would leave them),
then `--recent` minutes of every partition's reports with every metric (offsets, lag, lag in seconds),
written at the clock one batch per 30 s metrics period, as a live driver and aggregator leave them: the
status rules judge reports by their age. Nothing is written during the load: keep `--duration` x 3
under ~80 s, or reports turn stale (UNKNOWN) and lagging partitions STOP, as when a driver stops.
A few topics' partitions fall behind more every period, so the lag evaluation has problems to list.

The service runs as deployed (`srm-service --config`, gunicorn, 2 sync workers), and each endpoint
gets a closed-loop load of its own (`--connections` keep-alive connections, `--duration` seconds):
- `/v2/cluster-info/west` (default range, 2 h at `auto`);
- `/v2/replications`;
- `/v2/topic-metrics/east/west/<random topic>/record_count` over the last 7 days at `auto`.
`service_rss_mb` is the largest peak RSS (VmHWM) of a gunicorn worker at the end. Last line:
`p99_ms_cluster_info=<ms> p99_ms_replications=<ms> p99_ms_topic_7d=<ms> service_rss_mb=<mb>`; targets
p99 <= 50 ms each and <= 300 MB per worker (reported, never asserted). Run it alone on the host.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import cast

import pyarrow as pa
import redis

from aggregator.partition_partials import PARTS_SCHEMA, collect
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
THIN_HOURS, THIN_TOPICS = 2, 10  # the 2 h before the recent reports: a few partitions' reports
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
PARTITION_THIN = (
    '{"v":1,"kind":"partition","ts":%d,"period_ms":30000,"source":"east","target":"west",'
    '"topic":"east.t%04d","upstream_topic":"t%04d","partition":0,"record_count":%d,"byte_count":%d,'
    '"replication_latency_ms":{"min":1,"max":%d,"avg":%d,"last":3,"count":%d},"records_lag":%d}'
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


def thin_values(ts: int, rng: random.Random, topics: int = TOPICS) -> list[bytes]:
    """A few partitions' reports, every period of the 2 h before the recent ones: the replication-level
    10 s windows a cluster-info answer reads over its default range, at a fraction of a full fill's cost."""
    out = []
    for topic in range(min(THIN_TOPICS, topics)):
        count, latency = rng.randint(50, 600), rng.randint(3, 40)
        out.append((PARTITION_THIN % (ts, topic, topic, count, count * 120, latency * 2, latency, count,
                                      rng.choice((0, 1, 3)))).encode())
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
    mapper = sink.task_function(state, now_ms)
    kafka = kafka_columns(values, ts)
    parts = pa.Table.from_batches(list(mapper(iter(kafka.to_batches()))), schema=PARTS_SCHEMA)
    sink.write(collect(parts).partials, batch_id, state)


def fill(url: str, now_ms: int, history_step_h: int, live_min: int, topics: int = TOPICS) -> str:
    rng = random.Random(SEED)
    sink = RedisRollupSink(url, "bench-scale", target=TARGET)
    thin_from = now_ms - THIN_HOURS * HOUR_MS
    history = list(range(now_ms - HISTORY_DAYS * 24 * HOUR_MS, thin_from, history_step_h * HOUR_MS))
    thin = list(range(thin_from + PERIOD_MS - 1_000, now_ms, PERIOD_MS))
    began, batch_id = time.monotonic(), 0
    for ts in history:
        write_batch(sink, history_values(ts, rng, topics), ts, batch_id)
        batch_id += 1
    for ts in thin:
        write_batch(sink, thin_values(ts, rng, topics), ts, batch_id)
        batch_id += 1
    history_s = time.monotonic() - began
    # Every partition's reports at the clock, one batch a metrics period (later when a batch takes longer),
    # as a live driver and aggregator leave them: the status rules judge reports by their age and the
    # lag verdicts by their spacing, so these cannot be written ahead of time.
    live = live_min * 60_000 // PERIOD_MS
    live_began = time.monotonic()
    for period in range(live):
        time.sleep(max(0.0, live_began + period * PERIOD_MS / 1000 - time.monotonic()))
        ts = int(time.time() * 1000) - 1_000
        write_batch(sink, recent_values(ts, period, rng, topics), ts, batch_id)
        batch_id += 1
    live_s = time.monotonic() - live_began
    client = redis.Redis.from_url(url)
    memory = cast(dict, client.info("memory"))["used_memory"] / 2**20
    keys = client.dbsize()
    client.close()
    sink.close()
    return (f"filled through the aggregator's writer: {len(history)} history batches of "
            f"{topics * PARTITIONS} reports and {len(thin)} of {min(THIN_TOPICS, topics)} in "
            f"{history_s:.0f} s, then {live} of {topics * PARTITIONS} at the clock over {live_s:.0f} s "
            f"(the newest {time.time() - ts / 1000:.0f} s old); Redis holds {keys} keys, {memory:.0f} MiB")


def cluster_info_paths(now_ms: int) -> list[str]:  # the default range ends now
    return [f"/v2/cluster-info/{TARGET}"]


def replications_paths(now_ms: int) -> list[str]:
    return ["/v2/replications"]


def topic_7d_paths(now_ms: int, topics: int = TOPICS) -> list[str]:
    rng = random.Random(SEED + 1)
    week = HISTORY_DAYS * 24 * HOUR_MS
    return [f"/v2/topic-metrics/{SOURCE}/{TARGET}/t{rng.randrange(topics):04d}/record_count"
            f"?from={now_ms - week}&to={now_ms}&granularity=auto" for _ in range(500)]


def status_line(port: int) -> str:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/v2/replications")
    body = json.loads(connection.getresponse().read())
    connection.close()
    return "; ".join(
        f"{r['source']}->{r['target']} {r['state']} ({r['explanation']}), {r['topics']} topics, lag "
        f"{r['lag']['status']}/{r['lag']['reason']} total {r['lag']['total_lag']}, "
        f"{len(r['lag']['partitions'])} partitions listed, worst lag {r['lag_seconds']} s"
        for r in body["replications"])


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


def run(args, run_python_load) -> int:  # bench/api.py's namespace and load generator
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
        print(f"what /v2/replications answers: {status_line(port)}")
        figures = {}
        now_ms = int(time.time() * 1000)
        for name, paths in (("cluster_info", cluster_info_paths(now_ms)),
                            ("replications", replications_paths(now_ms)),
                            ("topic_7d", topic_7d_paths(now_ms, args.topics))):
            run_python_load(port, paths, args.connections, 2)  # warm-up: each worker's first answers
            rps, p50, p99 = run_python_load(port, paths, args.connections, args.duration)
            print(f"{name}: {rps:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
            figures[f"p99_ms_{name}"] = p99
        assert service.process is not None  # started above
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
