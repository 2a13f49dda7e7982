"""REST API throughput and latency: topic metrics over 2 h at 1-min granularity under load.

Redis is filled with 50 replications x 100 topics x 24 h of 1-min windows (record_count), keys and
members made by aggregator.redis_layout; the service runs as `srm-service --config` (gunicorn), and
the load comes from a separate process: Debian's `wrk` when installed, else a Python load generator
(closed loop, keep-alive connections, in its own processes). Requests pick random topics.
Also prints where one request's time goes (in-process: Redis read, summary, JSON answer), to name
the limiting stage. Last line: ``api_rps=<n> api_p50_ms=<ms> api_p99_ms=<ms>``.
Target (reported, never asserted): p99 <= 15 ms at >= 1500 req/s on 2 cores.
"""

from __future__ import annotations

import http.client
import multiprocessing
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as `python bench/api.py`: the repository root must come before bench/, whose aggregator.py
# (the aggregator's bench) would otherwise shadow the aggregator package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402

from aggregator import redis_layout as layout  # noqa: E402
from stack import srm_properties  # noqa: E402
from stack.kafka_cluster import free_port, wait_for_port  # noqa: E402
from stack.processes import ManagedProcess  # noqa: E402
from stack.redis_server import RedisServer  # noqa: E402

REPLICATIONS, TOPICS, HOURS = 50, 100, 24
TARGET = "west"
METRIC = "record_count"
DURATION_S, CONNECTIONS = 20, 16
# Sync gunicorn workers, one per core: the work is CPU-bound (more workers measured slower here).
WORKERS = 2
TARGET_P99_MS, TARGET_RPS = 15.0, 1500.0
SEED = 7


def fill(url: str, now_ms: int) -> int:
    """Every topic's 1-min record_count windows for the last HOURS; returns the number of windows."""
    client = redis.Redis.from_url(url)
    rng = random.Random(SEED)
    last = layout.window_start(now_ms, "1m")
    starts = [last - i * 60_000 for i in range(HOURS * 60)]
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
            members = {}
            for start in starts:
                value = float(rng.randint(0, 600))
                members[layout.encode_member(layout.WindowAggregate(start, 6, value, 0, value, value))] = (
                    start
                )
            pipe.zadd(layout.series_key(series, "1m"), members)
            written += len(members)
        pipe.execute()
    client.close()
    return written


def paths(now_ms: int, count: int) -> list[str]:
    rng = random.Random(SEED + 1)
    query = f"from={now_ms - 2 * 3_600_000}&to={now_ms}&granularity=1m"
    return [
        f"/v2/topic-metrics/src{rng.randrange(REPLICATIONS):02d}/{TARGET}/topic{rng.randrange(TOPICS):03d}/"
        f"{METRIC}?{query}"
        for _ in range(count)
    ]


def _timed(calls: list, repeat: int = 1) -> float:
    """Mean seconds per call."""
    began = time.perf_counter()
    for _ in range(repeat):
        for call in calls:
            call()
    return (time.perf_counter() - began) / (len(calls) * repeat)


def stage_breakdown(url: str, now_ms: int) -> str:
    """Per-request cost of each stage, in this process (no network, no gunicorn): which one limits."""
    from werkzeug.test import EnvironBuilder

    from service.app import create_app
    from service.extensions import metrics_reader
    from service.metric_summary import summarize

    app = create_app({"REDIS_URL": url})
    sample = paths(now_ms, 300)
    environs = [EnvironBuilder(path=path, query_string=query).get_environ()
                for path, query in (p.split("?") for p in sample)]

    def start_response(status: str, headers: list, exc_info: object = None) -> None:
        assert status.startswith("200"), status

    whole = _timed([lambda e=e: b"".join(app(dict(e), start_response)) for e in environs])
    with app.app_context():
        reader = metrics_reader()
        subjects = [(p.split("/")[3], p.split("/")[5]) for p in sample]
        since = now_ms - 7_200_000
        reads = [lambda s=s, t=t: reader.upstream_topic_metric(s, TARGET, t, METRIC, since, now_ms, "1m")
                 for s, t in subjects]
        series = [layout.SeriesId(TARGET, s, f"{s}.{t}", layout.WHOLE_TOPIC, METRIC) for s, t in subjects]
        windows = [reader.windows([one], "1m", since, now_ms)[0] for one in series]
        summaries = [lambda w=w: summarize(METRIC, "1m", w) for w in windows]
        read, summary = _timed(reads), _timed(summaries)
    return (f"stages per request (in-process, one core): whole app {whole * 1000:.2f} ms = Redis round trip "
            f"and decode {(read - summary) * 1000:.2f} ms + summary {summary * 1000:.2f} ms + Flask routing, "
            f"arguments and JSON {max(0.0, whole - read) * 1000:.2f} ms")


def run_wrk(base: str, sample: list[str], workdir: Path) -> tuple[float, float, float]:
    script = workdir / "paths.lua"
    lua_list = ",\n".join(f'"{p}"' for p in sample)
    script.write_text(
        f"local paths = {{{lua_list}}}\nmath.randomseed({SEED})\n"
        "request = function() return wrk.format('GET', paths[math.random(#paths)]) end\n"
    )
    out = subprocess.run(
        ["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{DURATION_S}s", "--latency", "-s", str(script), base],
        capture_output=True,
        text=True,
        timeout=DURATION_S + 60,
        check=True,
    ).stdout
    print(out.strip())
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return rps, _wrk_ms(out, "50%"), _wrk_ms(out, "99%")


def _wrk_ms(out: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", out).groups()
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


def run_python_load(port: int, sample: list[str]) -> tuple[float, float, float]:
    results: multiprocessing.Queue = multiprocessing.Queue()
    stop_at = time.monotonic() + DURATION_S
    workers = [
        multiprocessing.Process(target=_load_worker, args=(port, sample, stop_at, results))
        for _ in range(CONNECTIONS)
    ]
    for worker in workers:
        worker.start()
    latencies = [x for _ in workers for x in results.get(timeout=DURATION_S + 60)]
    for worker in workers:
        worker.join(timeout=30)
    cuts = statistics.quantiles(latencies, n=100)
    return len(latencies) / DURATION_S, cuts[49] * 1000, cuts[98] * 1000


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-api-"))
    server = RedisServer(workdir / "redis").start()
    service = None
    try:
        now_ms = int(time.time() * 1000)
        began = time.monotonic()
        windows = fill(server.url, now_ms)
        print(
            f"filled {windows} windows ({REPLICATIONS} replications x {TOPICS} topics x {HOURS} h of 1-min "
            f"windows) in {time.monotonic() - began:.1f} s"
        )
        print(stage_breakdown(server.url, now_ms))
        port = free_port()
        props = srm_properties.write(
            workdir / "srm.properties",
            {"east": "127.0.0.1:1", TARGET: "127.0.0.1:2"},
            [("east", TARGET)],
            server.url,
            {"service.port": port, "service.workers": WORKERS, "service.threads": 1},
        )
        service = ManagedProcess.python_module(
            "service", "service", ["--config", str(props)], workdir
        ).start()
        wait_for_port(port, 60, service.process)
        sample = paths(now_ms, 2000)
        if shutil.which("wrk"):
            print(f"load: wrk, {CONNECTIONS} connections, {DURATION_S} s")
            rps, p50, p99 = run_wrk(f"http://127.0.0.1:{port}", sample, workdir)
        else:
            print(f"load: Python generator ({CONNECTIONS} processes, keep-alive), {DURATION_S} s (no wrk)")
            rps, p50, p99 = run_python_load(port, sample)
        print(
            f"target p99 <= {TARGET_P99_MS:g} ms at >= {TARGET_RPS:g} req/s: "
            f"p99 ratio {p99 / TARGET_P99_MS:.2f}, "
            f"throughput ratio {rps / TARGET_RPS:.2f}"
        )
        print(f"api_rps={rps:.0f} api_p50_ms={p50:.2f} api_p99_ms={p99:.2f}")
        return 0
    finally:
        if service is not None:
            service.stop()
        server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
