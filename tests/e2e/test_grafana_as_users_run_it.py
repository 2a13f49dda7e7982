"""Issue 21's findings through the whole pipeline: records produced on `east`, replicated by the driver
process, rolled up by the Spark query into Redis, answered by the service under gunicorn, asked the
way simpod-json-datasource 0.6.5 asks (tests/service/grafana_plugin.py, citing its source).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from aggregator.query import RollupQuerySpec, start_rollup_query
from stack import srm_properties
from stack.kafka_cluster import free_port, wait_for_port
from stack.processes import ManagedProcess
from tests.service.grafana_plugin import (
    escape_string_for_regex,
    format_regex,
    health_check,
    query_request,
    series_values,
    to_frames,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
UID = uuid.uuid4().hex[:8]
# Upstream topic -> records produced; the long name gives a backtracking engine 2^40 paths to try.
TOPICS = {f"orders-{UID}": 300, f"payments-{UID}": 200, f"my.topic-{UID}": 120, f"audit-log-{UID}": 80,
          f"{'a' * 32}{UID}": 10}
ORDERS, PAYMENTS, DOTTED, DASHED, LONG = TOPICS
PARTITIONS = 3


def produce(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
                                       for t in TOPICS]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, count in TOPICS.items():
        for i in range(count):
            producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode())
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, kafka_clusters: dict[str, str], redis_url: str, spark):
    """The service's base URL, once every topic's record_count has reached Redis."""
    tmp = tmp_path_factory.mktemp("grafana-e2e")
    port = free_port()
    config = srm_properties.write(
        tmp / "srm.properties", kafka_clusters, [("east", "west")], redis_url,
        {"metrics.period": 1, "refresh.topics.interval.seconds": 1, "service.port": port,
         "service.workers": 1})
    processes, query = [], None
    try:
        for name in ("driver", "service"):
            processes.append(ManagedProcess.python_module(name, name, ["--config", str(config)], tmp).start())
        query = start_rollup_query(spark, RollupQuerySpec(
            target="west", bootstrap_servers=kafka_clusters["west"], redis_url=redis_url,
            checkpoint_dir=str(tmp / "checkpoints"), trigger_interval="1 second", watermark_delay_ms=60_000))
        wait_for_port(port, 30, processes[-1].process)
        base = f"http://127.0.0.1:{port}"
        started_ms = int(time.time() * 1000) - 60_000
        produce(kafka_clusters["east"])
        wait_for_counts(base, (started_ms, started_ms + 3_600_000))
        yield base, (started_ms, started_ms + 3_600_000)
    finally:
        if query is not None:
            query.stop()
        for process in processes:
            process.stop()
            print(f"--- {process.name} log ---\n{process.log_tail()}")


def wait_for_counts(base: str, span: tuple[int, int]) -> None:
    """Poll with one literal target per topic, a request every version of the service answers."""
    targets = [{"refId": f"T{i}", "target": "record_count", "payload": {"source": "east", "topic": t}}
               for i, t in enumerate(TOPICS)]
    body = query_request(targets, {}, span)
    seen, deadline = {}, time.monotonic() + 120
    while time.monotonic() < deadline:
        response = requests.post(f"{base}/grafana/query", json=body, timeout=10)
        if response.status_code == 200:
            seen = {f["labels"]["topic"]: v for f in to_frames(response.json())
                    for v in [sum(p[0] for p in f["points"] if p[0] is not None)]}
            if seen == TOPICS:
                return
        time.sleep(1)
    raise AssertionError(f"record counts never reached {TOPICS}: {seen}")


def ask(service, targets, variables=None, filters=(), timeout: float = 10) -> list[dict]:
    base, span = service
    body = query_request(targets, variables or {}, span, filters)
    response = requests.post(f"{base}/grafana/query", json=body, timeout=timeout, allow_redirects=False)
    assert response.status_code == 200, response.text
    return to_frames(response.json())


def counts(frames: list[dict]) -> dict[str, float]:
    return {f["labels"]["topic"]: sum(p[0] for p in f["points"] if p[0] is not None) for f in frames}


def target(metric: str, **payload) -> dict:
    return {"refId": "A", "target": metric, "payload": {"source": "east", **payload}, "editorMode": "code"}


def test_save_and_test_passes_on_the_provisioned_url(service):
    """Finding 1: Grafana's proxy GETs the datasource URL as provisioned, follows no redirect
    (src/DataSource.ts:89-101)."""
    base, _ = service
    provisioned = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/srm.yaml").read_text())
    for datasource in provisioned["datasources"]:
        path = urlparse(datasource["url"]).path
        response = requests.get(base + path, timeout=5, allow_redirects=False)
        assert health_check(response.status_code), f"{path}: {response.status_code} {response.headers}"


def test_variables_formatted_as_the_plugin_formats_them(service):
    """Finding 2: a multi-value variable as `(a|b)`, single values escaped by either Grafana escaper."""
    frames = ask(service, [target("record_count", topic="$topic")], {"topic": [ORDERS, PAYMENTS]})
    assert counts(frames) == {ORDERS: 300, PAYMENTS: 200}
    frames = ask(service, [target("record_count", topic="$topic")], {"topic": DOTTED})
    assert counts(frames) == {DOTTED: 120}
    frames = ask(service, [target("record_count", topic=format_regex(DASHED, escape_string_for_regex))])
    assert counts(frames) == {DASHED: 80}


def test_a_multi_metric_target_gives_one_series_per_metric(service):
    """Finding 2: `$metric` fed by the service's own `metrics` variable arrives as an alternation."""
    frames = ask(service, [target("$metric", topic="$topic")],
                 {"metric": ["byte_count", "record_count"], "topic": [ORDERS, DOTTED]})
    totals = series_values(frames)
    assert len(totals) == 4 == len(frames)  # names differ, so the legend tells them apart
    assert totals[f"record_count east->west {ORDERS}"] == 300
    assert totals[f"record_count east->west {DOTTED}"] == 120
    assert totals[f"byte_count east->west {ORDERS}"] > 0 and totals[f"byte_count east->west {DOTTED}"] > 0


def test_every_ad_hoc_operator_grafana_offers(service):
    """Finding 3: `<` and `>` filter (text here: the names are not numbers); an operator the service
    cannot apply is ignored with a notice in the frame meta, the panel still drawn."""
    ours = {"key": "topic", "operator": "=~", "value": f".*{UID}"}

    def topics(operator: str, value: str) -> list[dict]:
        return ask(service, [target("record_count")],
                   filters=[ours, {"key": "topic", "operator": operator, "value": value}])

    assert set(counts(topics("<", "n"))) == {DASHED, DOTTED, LONG}
    assert set(counts(topics(">", "n"))) == {ORDERS, PAYMENTS}
    other = topics("<>", "x")
    assert counts(other) == TOPICS
    notice = other[0]["meta"]["notices"][0]["text"]
    assert notice == "filter topic <> x: operator '<>' not supported here, ignored"


def test_a_backtracking_pattern_answers_at_once(service):
    """Issue 16's ReDoS through gunicorn: `(.+)+X` against a 40-character topic name."""
    began = time.monotonic()
    frames = ask(service, [target("record_count", topic="(.+)+X")],
                 filters=[{"key": "topic", "operator": "=~", "value": "(.+)+Y"}], timeout=5)
    assert frames == [] and time.monotonic() - began < 5
