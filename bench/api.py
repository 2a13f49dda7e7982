"""REST API throughput and latency: topic metrics over 2 h at 1-min granularity under load.

Redis is filled with 50 replications x 100 topics x 24 h of 1-min windows, each member holding the
eight metrics of a topic's window as the aggregator writes them (the requests ask for record_count), keys
and members made by contract.redis_layout; the service runs as `srm-service --config` (gunicorn), and
the load comes from a separate process: Debian's `wrk` when installed, else a Python load generator
(closed loop, keep-alive connections, in its own processes). Requests pick random topics.
Also prints where one request's time goes (in-process: Redis pipeline, decode, summary, JSON answer,
Flask) and the CPU each process spends per request under load (service, Redis, load generator), to
name the limiting stage. Last line: ``api_rps=<n> api_p50_ms=<ms> api_p99_ms=<ms> service_cpu_us=<us>``
(the service's CPU per request under load, user + kernel, gunicorn master and workers).
Target (reported, never asserted): p99 <= 15 ms at >= 1500 req/s on 2 cores.

`--scale` is a mode of its own (bench/api_scale.py): 1,000 topics x 10 partitions written through the
aggregator's writer, then cluster-info, every replication's status and a topic's 7 days, each under load;
last line ``p99_ms_cluster_info=<ms> p99_ms_replications=<ms> p99_ms_topic_7d=<ms> service_rss_mb=<mb>``.
"""

from __future__ import annotations

import argparse
import http.client
import math
import multiprocessing
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

# Run as `python bench/api.py`: the repository root must come before bench/, whose aggregator.py
# (the aggregator's bench) would otherwise shadow the aggregator package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.process_cpu import stat_ticks
from contract import redis_layout as layout
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.redis_server import RedisServer

REPLICATIONS, TOPICS, HOURS = 50, 100, 24
TARGET = "west"
METRIC = "record_count"
DURATION_S, CONNECTIONS = 20, 16
# Sync gunicorn workers, one per core: the work is CPU-bound. Measured on 2 cores: 3 sync workers give
# less (1563 vs 1619 req/s) and gthread workers (2 x 2 threads, keep-alive) the same rate with twice the p99.
WORKERS, THREADS = 2, 1
TARGET_P99_MS, TARGET_RPS = 15.0, 1500.0
SEED = 7
# --scale: one connection per worker (latency without queueing behind another request), per endpoint.
SCALE_CONNECTIONS, SCALE_DURATION_S = 2, 10


def fill(url: str, now_ms: int, hours: int = HOURS) -> int:
    """Every topic's 1-min windows for the last ``hours``; returns the number of windows."""
    client = redis.Redis.from_url(url)
    rng = random.Random(SEED)
    last = layout.window_start(now_ms, "1m")
    starts = [last - i * 60_000 for i in range(hours * 60)]
    written = 0
    for r in range(REPLICATIONS):
        source = f"src{r:02d}"
        pipe = client.pipeline(transaction=False)
        pipe.sadd(layout.targets_key(), TARGET)
        pipe.sadd(layout.sources_key(TARGET), source)
        for t in range(TOPICS):
            topic = f"topic{t:03d}"
            pipe.hset(layout.topics_key(TARGET, source), f"{source}.{topic}", topic)
            series = layout.SeriesId(TARGET, source, f"{source}.{topic}", layout.WHOLE_TOPIC, METRIC)
            members = {str(start): layout.encode_member(start, topic_window(start, rng.randint(0, 600)))
                       for start in starts}
            pipe.hset(layout.series_key(series, "1m"), mapping={**members, layout.NEWEST_FIELD: last})
            written += len(members)
        pipe.execute()
    client.close()
    return written


def topic_window(start: int, records: int) -> dict[str, layout.WindowAggregate]:
    """A topic's metrics over one window of six reports, with the event ts of each last value (as the
    aggregator writes them): the member a request reads record_count out of is this big."""
    ts, value, offset = start + 55_000, float(records), 1_000_000.0 + records

    def gauge(low: float, high: float) -> layout.WindowAggregate:
        return layout.WindowAggregate(start, 6, 3 * (low + high), low, high, high, ts)

    latencies = {  # per record: none in a window without records
        "replication_latency_ms": layout.WindowAggregate(start, value, 35.0 * value, 12, 80, 31, ts),
        "record_age_ms": layout.WindowAggregate(start, value, 40.0 * value, 15, 95, 38, ts),
    } if records else {}
    return {
        "record_count": layout.WindowAggregate(start, 6, value, 0, value, value, ts),
        "byte_count": layout.WindowAggregate(start, 6, 512 * value, 0, 512 * value, 512 * value, ts),
        **latencies,
        "records_lag": gauge(0, value),
        "source_end_offset": gauge(offset - 5, offset),
        "upstream_offset": gauge(offset - 9, offset - 4),
        "target_offset": gauge(offset - 9, offset - 4),
    }


def paths(now_ms: int, count: int) -> list[str]:
    rng = random.Random(SEED + 1)
    query = f"from={now_ms - 2 * 3_600_000}&to={now_ms}&granularity=1m"
    return [
        f"/v2/topic-metrics/src{rng.randrange(REPLICATIONS):02d}/{TARGET}/topic{rng.randrange(TOPICS):03d}/"
        f"{METRIC}?{query}"
        for _ in range(count)
    ]


def _timed(calls: list, clock: Callable[[], float] = time.perf_counter) -> float:
    """Mean seconds per call."""
    began = clock()
    for call in calls:
        call()
    return (clock() - began) / len(calls)


def stage_breakdown(url: str, now_ms: int) -> str:
    """Per-request cost of each stage, in this process (no network, no gunicorn): which one limits."""
    from werkzeug.test import EnvironBuilder

    from service.api.common import metric_response
    from service.app import create_app
    from service.extensions import metrics_reader
    from service.metric_summary import summarize_columns
    from service.metrics_reader import window_columns

    app = create_app({"REDIS_URL": url})
    sample = paths(now_ms, 300)
    environs = [EnvironBuilder(path=path, query_string=query).get_environ()
                for path, query in (p.split("?") for p in sample)]

    def start_response(status: str, headers: list, exc_info: object = None) -> Callable[[bytes], object]:
        assert status.startswith("200"), status
        return lambda body: None  # PEP 3333's write(): the app answers through its iterable instead

    requests = [lambda e=e: b"".join(app(dict(e), start_response)) for e in environs]
    _timed(requests)  # warm-up: imports, connection
    whole, whole_cpu = _timed(requests), _timed(requests, time.process_time)
    since = now_ms - 7_200_000
    subjects = [(p.split("/")[3], p.split("/")[5]) for p in sample]
    with app.test_request_context():
        reader = metrics_reader()
        reads = [lambda s=s, t=t: reader.upstream_topic_metric(s, TARGET, t, METRIC, since, now_ms, "1m")
                 for s, t in subjects]
        keys = [layout.series_key(layout.SeriesId(TARGET, s, f"{s}.{t}", layout.WHOLE_TOPIC, METRIC), "1m")
                for s, t in subjects]
        fields = layout.window_fields("1m", since, now_ms)
        replies = [layout.held(cast(list, reader.client.hmget(key, fields))) for key in keys]
        columns = [window_columns(reply, METRIC) for reply in replies]
        identity = {"source": "s", "target": TARGET, "upstreamTopic": "t", "topic": "s.t", "from": since,
                    "to": now_ms}
        read = _timed(reads)
        decode = _timed([lambda r=r: window_columns(r, METRIC) for r in replies])
        summary = _timed([lambda c=c: summarize_columns(METRIC, "1m", c) for c in columns])
        # Each answer written right after it is made, as in a request: 300 answers kept alive would make the
        # garbage collector's passes, not the JSON, the cost measured.
        answer = _timed([lambda c=c: metric_response(identity, summarize_columns(METRIC, "1m", c))
                         for c in columns]) - summary
    ms = 1000
    return (f"stages per request (in-process, one core): whole app {whole * ms:.2f} ms "
            f"({whole_cpu * ms:.2f} ms CPU) = Redis pipeline {(read - decode - summary) * ms:.2f} ms + "
            f"decode {decode * ms:.2f} ms + summary {summary * ms:.2f} ms + JSON {answer * ms:.2f} ms + "
            f"Flask routing, arguments and the rest {max(0.0, whole - read - answer) * ms:.2f} ms")


def run_wrk(base: str, sample: list[str], workdir: Path, connections: int, duration_s: int
            ) -> tuple[float, float, float]:
    script = workdir / "paths.lua"
    lua_list = ",\n".join(f'"{p}"' for p in sample)
    script.write_text(
        f"local paths = {{{lua_list}}}\nmath.randomseed({SEED})\n"
        "request = function() return wrk.format('GET', paths[math.random(#paths)]) end\n"
    )
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{duration_s}s", "--latency", "-s", str(script), base],
        capture_output=True,
        text=True,
        timeout=duration_s + 60,
        check=True,
    ).stdout
    print(out.strip())
    rps = float(_wrk_line(out, r"Requests/sec:\s+([\d.]+)").group(1))
    return rps, _wrk_ms(out, "50%"), _wrk_ms(out, "99%")


def _wrk_line(out: str, pattern: str) -> re.Match[str]:
    found = re.search(pattern, out)
    if found is None:
        raise RuntimeError(f"wrk printed no line matching {pattern!r}:\n{out}")
    return found


def _wrk_ms(out: str, percentile: str) -> float:
    value, unit = _wrk_line(out, rf"{percentile}\s+([\d.]+)(us|ms|s)").groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _load_worker(port: int, sample: list[str], stop_at: float, results: multiprocessing.Queue) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    latencies, rng = [], random.Random()
    while time.monotonic() < stop_at:
        began = time.perf_counter()
        connection.request("GET", rng.choice(sample))
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - began)
    connection.close()
    results.put(latencies)


def run_python_load(port: int, sample: list[str], connections: int, duration_s: int
                    ) -> tuple[float, float, float]:
    results: multiprocessing.Queue = multiprocessing.Queue()
    stop_at = time.monotonic() + duration_s
    workers = [
        multiprocessing.Process(target=_load_worker, args=(port, sample, stop_at, results))
        for _ in range(connections)
    ]
    for worker in workers:
        worker.start()
    latencies = [x for _ in workers for x in results.get(timeout=duration_s + 60)]
    for worker in workers:
        worker.join(timeout=30)
    cuts = statistics.quantiles(latencies, n=100)
    return len(latencies) / duration_s, cuts[49] * 1000, cuts[98] * 1000


def _process_tree(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid, *(p for child in children for p in _process_tree(int(child)))]


class CpuMeter:
    """CPU seconds each stage spends under load, as (user, kernel): the service (gunicorn master and
    workers), Redis, and the load generator (this process's children). Per request, it names the limiting
    stage even on a machine other work shares, where wall-clock figures mislead; the kernel's share is
    mostly loopback TCP (connections, sends and receives), which no Python change in the app touches."""

    def __init__(self, service_pid: int, redis_pid: int) -> None:
        self.service_pid, self.redis_pid = service_pid, redis_pid

    def sample(self) -> dict[str, tuple[float, float]]:
        tick = os.sysconf("SC_CLK_TCK")
        service = [stat_ticks(Path(f"/proc/{p}/stat")) for p in _process_tree(self.service_pid)]
        redis_user, redis_kernel = stat_ticks(Path(f"/proc/{self.redis_pid}/stat"))
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {
            "service": (sum(u for u, _ in service) / tick, sum(k for _, k in service) / tick),
            "redis": (redis_user / tick, redis_kernel / tick),
            "load generator": (children.ru_utime, children.ru_stime),
        }


def cpu_report(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]],
               requests: float) -> str:
    def us(stage: str, part: int) -> float:
        return (after[stage][part] - before[stage][part]) / requests * 1e6

    per_request = {stage: us(stage, 0) + us(stage, 1) for stage in before}
    total = sum(per_request.values())
    stages = ", ".join(f"{stage} {value:.0f} us" for stage, value in per_request.items())
    kernel = ", ".join(f"{stage} {us(stage, 1):.0f} us" for stage in before)
    limit = 2 * 1e6 / total if total else math.inf
    return (f"CPU per request under load: {stages}; total {total:.0f} us, so at most {limit:.0f} req/s "
            f"on 2 cores; the largest is the {max(per_request, key=per_request.__getitem__)}; "
            f"of which in the kernel: {kernel}")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=WORKERS, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads per worker (gthread when > 1)")
    parser.add_argument("--connections", type=int,
                        help=f"default {CONNECTIONS}, with --scale {SCALE_CONNECTIONS}")
    parser.add_argument("--duration", type=int, help=f"seconds of load (default {DURATION_S}; with --scale "
                        f"{SCALE_DURATION_S} per endpoint)")
    parser.add_argument("--hours", type=int, default=HOURS, help="hours of windows per topic (fill size)")
    parser.add_argument("--scale", action="store_true",
                        help="1,000 topics x 10 partitions through the aggregator's writer (api_scale.py)")
    parser.add_argument("--history-step", type=int, default=6,
                        help="with --scale: hours between history reports over the 7 days")
    parser.add_argument("--recent", type=int, default=6,
                        help="with --scale: minutes of every partition's reports at the clock, 30 s apart")
    parser.add_argument("--topics", type=int, default=1000, help="with --scale: topics (10 partitions each)")
    args = parser.parse_args(argv)
    if args.connections is None:
        args.connections = SCALE_CONNECTIONS if args.scale else CONNECTIONS
    if args.duration is None:
        args.duration = SCALE_DURATION_S if args.scale else DURATION_S
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.scale:
        from bench import api_scale

        return api_scale.run(args, run_python_load)
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-api-"))
    server = RedisServer(workdir / "redis").start()
    service = None
    try:
        now_ms = int(time.time() * 1000)
        began = time.monotonic()
        windows = fill(server.url, now_ms, args.hours)
        print(
            f"filled {windows} windows ({REPLICATIONS} replications x {TOPICS} topics x {args.hours} h of "
            f"1-min windows) in {time.monotonic() - began:.1f} s"
        )
        print(stage_breakdown(server.url, now_ms))
        # Other work on a shared machine moves the figures: the load before the run says how much.
        print(f"load average before the load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        port = free_port()
        props = srm_properties.write(
            workdir / "srm.properties",
            {"east": "127.0.0.1:1", TARGET: "127.0.0.1:2"},
            [("east", TARGET)],
            server.url,
            {"service.port": port, "service.workers": args.workers, "service.threads": args.threads,
             # Nothing to advertise to: the clusters above do not exist (a real advertisement is one
             # small record every few seconds, not part of the request path measured here).
             "service.target.clusters": "", "service.site": TARGET},
        )
        service = ManagedProcess.python_module(
            "service", "service", ["--config", str(props)], workdir
        ).start()
        wait_for_port(port, 60, service.process)
        sample = paths(now_ms, 2000)
        assert service.process is not None and server.process is not None  # started above
        meter = CpuMeter(service.process.pid, server.process.pid)
        before = meter.sample()
        if shutil.which("wrk"):
            print(f"load: wrk, {args.connections} connections, {args.duration} s, "
                  f"{args.workers} workers x {args.threads} threads")
            rps, p50, p99 = run_wrk(f"http://127.0.0.1:{port}", sample, workdir, args.connections,
                                    args.duration)
        else:
            print(f"load: Python generator ({args.connections} processes, keep-alive), {args.duration} s "
                  f"(no wrk), {args.workers} workers x {args.threads} threads")
            rps, p50, p99 = run_python_load(port, sample, args.connections, args.duration)
        after = meter.sample()
        print(cpu_report(before, after, rps * args.duration))
        print(f"load average after the load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(
            f"target p99 <= {TARGET_P99_MS:g} ms at >= {TARGET_RPS:g} req/s: "
            f"p99 ratio {p99 / TARGET_P99_MS:.2f}, "
            f"throughput ratio {rps / TARGET_RPS:.2f}"
        )
        service_us = sum(after["service"]) - sum(before["service"])
        print(f"api_rps={rps:.0f} api_p50_ms={p50:.2f} api_p99_ms={p99:.2f} "
              f"service_cpu_us={service_us / (rps * args.duration) * 1e6:.0f}")
        return 0
    finally:
        if service is not None:
            service.stop()
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
