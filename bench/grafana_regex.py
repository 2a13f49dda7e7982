"""What a Grafana /query with regex filters costs the service over many topics (issue 39's regex budget).

Redis (a real redis-server) holds one replication of --topics topics, each with a minute of 10 s windows of
four metrics, written through the aggregator's sink. The service answers in-process (Flask's test client:
no HTTP, no gunicorn), so the figure is the request's own work: parse, filters, Redis reads, answer.
Two bodies, each asked --repeat times (the median is printed):
- `regex`: the issue's shape: four metric targets, and ad-hoc filters `topic =~`, `topic !~` and an
  alternation (`=~ a|b|...`), a body of a few hundred bytes;
- `patterns`: 32 distinct `=~` filters (the most one request may carry since issue 39) on four targets,
  31 of them matching every topic.
Both select a few topics of the --topics, so the time is the filters' and not the answer's.

Usage: python bench/grafana_regex.py [--topics 1000] [--repeat 7]
Last line: `grafana_regex_ms=<regex body, median> grafana_patterns_ms=<patterns body, median>`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

# Run as `python bench/grafana_regex.py`: the repository root before bench/ (see bench/api.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout
from service.app import create_app
from stack.redis_server import RedisServer

METRICS = ("record_count", "byte_count", "replication_latency_ms", "records_lag")
WINDOWS = 6


def fill(url: str, topics: int, first: int) -> None:
    rows = []
    for i in range(topics):
        for w in range(WINDOWS):
            for metric in METRICS:
                rows.append({"target": "west", "source": "east", "topic": f"east.t{i}",
                             "upstream_topic": f"t{i}", "group": None, "partition": layout.WHOLE_TOPIC,
                             "metric": metric,
                             "window_start": first + w * 10_000, "count": 1, "sum": i, "min": i, "max": i,
                             "last": i})
    RedisRollupSink(url, "bench_grafana").write(rows, 0)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def body(first: int, filters: list[dict]) -> dict:
    targets = [{"refId": chr(65 + i), "target": m, "payload": {"source": "east", "target": "west"}}
               for i, m in enumerate(METRICS)]
    return {"range": {"from": iso(first), "to": iso(first + WINDOWS * 10_000)}, "intervalMs": 10_000,
            "maxDataPoints": 1000, "targets": targets, "adhocFilters": filters}


def timed(client, request: dict, repeat: int) -> tuple[float, int]:  # Flask's test client
    seconds, series = [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        response = client.post("/grafana/query", json=request)
        seconds.append(time.perf_counter() - began)
        if response.status_code != 200:
            raise SystemExit(f"/grafana/query answered {response.status_code}: "
                             f"{response.get_data(as_text=True)}")
        series = len(response.get_json())
    return statistics.median(seconds) * 1000, series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    first = int(time.time() * 1000) // 10_000 * 10_000 - WINDOWS * 10_000
    with tempfile.TemporaryDirectory(prefix="srm-bench-grafana-") as work:
        server = RedisServer(Path(work)).start()
        try:
            fill(server.url, args.topics, first)
            client = create_app({"REDIS_URL": server.url}).test_client()
            regex = [{"key": "topic", "operator": "=~", "value": r"east\.t[0-9]*7[0-9]"},
                     {"key": "topic", "operator": "!~", "value": r".*(1|3|5)$"},
                     {"key": "topic", "operator": "=~", "value": "|".join(f"t{i}.*" for i in range(10, 40))}]
            patterns = [{"key": "topic", "operator": "=~", "value": rf"(east\.)?t[0-9]{{0,{4 + i}}}"}
                        for i in range(31)]
            patterns.append({"key": "topic", "operator": "=~", "value": r"(east\.)?t[0-9]*77"})
            figures = {}
            for name, filters in (("regex", regex), ("patterns", patterns)):
                request = body(first, filters)
                ms, series = timed(client, request, args.repeat)
                figures[name] = ms
                print(f"{name}: {len(str(request))}-character body over {args.topics} topics: {series} "
                      f"series, {ms:.1f} ms (median of {args.repeat})", flush=True)
        finally:
            server.stop()
    print(f"grafana_regex_ms={figures['regex']:.1f} grafana_patterns_ms={figures['patterns']:.1f}")


if __name__ == "__main__":
    main()
