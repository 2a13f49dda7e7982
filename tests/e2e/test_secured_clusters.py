"""Secured clusters end to end: SASL/SCRAM, TLS (PEM and JKS trust stores), SASL_SSL and mTLS.

The properties file carries SRM's Java keys (``east.sasl.jaas.config``, ``east.ssl.truststore.*``…) as
an enterprise user writes them, one alias pair per mode over the same two brokers. One driver
(librdkafka rendering), a Spark rollup query per pair built by the aggregator's own ``query_specs``
(Java rendering) and one service all talk to the secured listeners of real brokers
(``secured_clusters``); records produced on east come back as record_count over HTTP in every mode. A
wrong password is named at once, reported as FAILED through the API, and costs a bounded number of log
lines. No secret appears in any log line of these tests.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from aggregator.__main__ import query_specs
from aggregator.query import start_rollup_query
from clients.client_renderings import check_client_configs
from contract.config import load_config
from contract.replication_policy import metrics_topic
from stack import srm_properties
from stack.kafka_cluster import KafkaClusters, free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.secured_listeners import client_properties
from tests.e2e.http_polling import poll_json
from tests.e2e.query_stop import stop_between_batches

pytestmark = pytest.mark.e2e

N = 200
PARTITIONS = 2
REFUSED = "east: SASL authentication failed (SCRAM-SHA-512): invalid credentials"
# The refused driver's two tasks (copy and checkpoints), as clients.retry_backoff names their steps.
RETRY = re.compile(r"(?P<task>replication|checkpoints of) east->west .*retr(?:ies|ying) in (?P<wait>\d+) s")

# mode id -> (listener mode, trust store shape, key store shape)
MODES = {
    "sasl_plaintext": ("sasl_plaintext", "pem", "pem"),
    "ssl_pem": ("ssl", "pem", "pem"),
    "ssl_jks": ("ssl", "jks", "pem"),
    "sasl_ssl": ("sasl_ssl", "pem", "pem"),
    "mtls_pem": ("mtls", "pem", "pem"),
    "mtls_jks": ("mtls", "jks", "jks"),
}


def write_config(path: Path, clusters: KafkaClusters, mode: str, trust: str, key_store: str,
                 redis_url: str, passwords: dict[str, str] | None = None) -> Path:
    bootstraps = {alias: clusters[alias].secured_bootstrap(mode) for alias in ("east", "west")}
    security = clusters["east"].security
    assert security is not None
    extra: dict[str, object] = {
        "metrics.period": 1, "refresh.topics.interval.seconds": 1, "service.port": free_port(),
        "service.workers": 1, "aggregator.checkpoint.dir": str(path.parent / "checkpoints"),
        "aggregator.trigger.interval.ms": 1000, "aggregator.watermark.delay.seconds": 60}
    for alias in bootstraps:
        password = (passwords or {}).get(alias)
        for key, value in client_properties(mode, security, trust, key_store, password).items():
            extra[f"{alias}.{key}"] = value
    return srm_properties.write(path, bootstraps, [("east", "west")], redis_url, extra)


def secrets_of(clusters: KafkaClusters, *more: str) -> list[str]:
    security = clusters["east"].security
    assert security is not None
    return [security.password, security.pki.store_password, *more]


def assert_no_secret(texts: dict[str, str], secrets: list[str]) -> None:
    for name, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"a secret appears in the {name} log"


def produce_plain(bootstrap: str, topic: str, count: int) -> None:
    """Test set-up through the PLAINTEXT listener."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode())
    assert producer.flush(30) == 0


def start_processes(config: Path, log_dir: Path, names: tuple[str, ...]) -> list[ManagedProcess]:
    return [ManagedProcess.python_module(name, name, ["--config", str(config)], log_dir).start()
            for name in names]



def mode_aliases(mode_id: str) -> tuple[str, str]:
    """The alias pair of a security mode: both name the session's east and west, through its listener."""
    bare = mode_id.replace("_", "")
    return f"east{bare}", f"west{bare}"


def write_modes_config(path: Path, clusters: KafkaClusters, topics: dict[str, str], redis_url: str) -> Path:
    """One file with an alias pair per security mode, each replicating its own topic (as a user with six
    differently secured clusters writes it). Heartbeats only for the six enabled pairs: 66 other ordered
    pairs of these aliases would otherwise each get a heartbeat task."""
    security = clusters["east"].security
    assert security is not None
    bootstraps: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    extra: dict[str, object] = {
        "metrics.period": 1, "refresh.topics.interval.seconds": 1, "service.port": free_port(),
        "service.workers": 1, "aggregator.checkpoint.dir": str(path.parent / "checkpoints"),
        "aggregator.trigger.interval.ms": 1000, "aggregator.watermark.delay.seconds": 60,
        "emit.heartbeats.enabled": "false"}
    for mode_id, (mode, trust, key_store) in MODES.items():
        source, target = mode_aliases(mode_id)
        pairs.append((source, target))
        for alias, physical in ((source, "east"), (target, "west")):
            bootstraps[alias] = clusters[physical].secured_bootstrap(mode)
            for key, value in client_properties(mode, security, trust, key_store).items():
                extra[f"{alias}.{key}"] = value
        extra[f"{source}->{target}.topics"] = topics[mode_id]
        extra[f"{source}->{target}.emit.heartbeats.enabled"] = "true"
    return srm_properties.write(path, bootstraps, pairs, redis_url, extra)


def test_record_count_flows_through_every_secured_mode(secured_clusters: KafkaClusters, redis_url: str,
                                                       spark, tmp_path: Path, capfd):
    """The six modes side by side: one driver and one service serve all six pairs, and each pair's
    target has its own rollup query, reading its own metrics topic through that pair's listener."""
    suffix = uuid.uuid4().hex[:6]
    topics = {mode_id: f"orders-{mode_id.replace('_', '-')}-{suffix}" for mode_id in MODES}
    config_path = write_modes_config(tmp_path / "srm.properties", secured_clusters, topics, redis_url)
    config = load_config(config_path)
    check_client_configs(config, ("java",))  # what srm-aggregator checks at start-up
    specs = {spec.target: spec for spec in query_specs(config)}
    port = config.setting("service.port")
    started_ms = int(time.time() * 1000) - 60_000
    processes, queries = [], []
    answers: dict[str, dict | None] = {}
    try:
        processes = start_processes(config_path, tmp_path, ("driver", "service"))
        for mode_id in MODES:
            source, target = mode_aliases(mode_id)
            # Six aliases name one broker: each query reads only its own pair's metrics topic.
            spec = replace(specs[target], topics_pattern=re.escape(metrics_topic(source)))
            queries.append(start_rollup_query(spark, spec))
        wait_for_port(port, 30, processes[-1].process)
        for topic in topics.values():
            produce_plain(secured_clusters.bootstrap("east"), topic, N)
        for mode_id, topic in topics.items():
            source, target = mode_aliases(mode_id)
            url = (f"http://127.0.0.1:{port}/v2/topic-metrics/{source}/{target}/{topic}/record_count"
                   f"?from={started_ms}")
            answers[mode_id] = poll_json(url, lambda a: a["value"] == N, 120)
        states = {mode_id: requests.get(f"http://127.0.0.1:{port}/v2/replications/{source}/{target}",
                                        timeout=10).json()
                  for mode_id, (source, target) in ((m, mode_aliases(m)) for m in MODES)}
        exceptions = [str(q.exception()) for q in queries if q.exception() is not None]
    finally:
        for process in processes:
            process.stop()
        stop_between_batches(queries)
    wrong = {mode_id: answer for mode_id, answer in answers.items() if answer is None or answer["value"] != N}
    assert not wrong, f"record_count over {sorted(wrong)}: {wrong}; queries: {exceptions}"
    failed = {mode_id: state for mode_id, state in states.items() if state["state"] == "FAILED"}
    assert not failed, failed
    logs = {p.name: p.log_file.read_text(errors="replace") for p in processes}
    logs["spark and test process"] = "".join(capfd.readouterr())
    assert_no_secret(logs, secrets_of(secured_clusters))


def test_wrong_password_is_named_at_once_reported_failed_and_quiet(secured_clusters: KafkaClusters,
                                                                   redis_url: str, spark, tmp_path: Path,
                                                                   capfd):
    wrong = f"wrong-{uuid.uuid4().hex}"
    good = write_config(tmp_path / "good.properties", secured_clusters, "sasl_ssl", "pem", "pem", redis_url)
    # The driver alone has the wrong password for east (its source); west, the target, takes it.
    bad = write_config(tmp_path / "driver.properties", secured_clusters, "sasl_ssl", "pem", "pem", redis_url,
                       passwords={"east": wrong})
    config = load_config(good)
    port = config.setting("service.port")
    processes, query = [], None
    try:
        service = start_processes(good, tmp_path, ("service",))[0]
        processes.append(service)
        query = start_rollup_query(spark, query_specs(config)[0])
        wait_for_port(port, 30, service.process)
        driver = start_processes(bad, tmp_path, ("driver",))[0]
        processes.append(driver)
        named_after = wait_for_line(driver.log_file, REFUSED, 10)
        assert named_after is not None, f"no '{REFUSED}' within 10 s:\n{driver.log_tail()}"
        error_lines = [line for line in read_lines(driver.log_file) if REFUSED in line]
        assert " ERROR " in error_lines[0]

        url = f"http://127.0.0.1:{port}/v2/replications/east/west"
        answer = poll_json(url, lambda a: a["state"] == "FAILED", 60)
        assert answer is not None and answer["state"] == "FAILED", answer
        assert REFUSED in answer["explanation"]

        # Until each task has logged a second back-off step: its wait is seen to grow.
        stepped = wait_for_lines(driver.log_file, lambda lines: sorted(
            len(waits) >= 2 for waits in retry_waits(lines).values()) == [True, True], 60)
        assert stepped is not None, f"no second back-off step of each task within 60 s:\n{driver.log_tail()}"
        lines = read_lines(driver.log_file)
    finally:
        for process in processes:
            process.stop()
        stop_between_batches([query] if query is not None else [])
    # A refused login from the start to each task's second back-off step (about 12 s; the bounds are a
    # minute's allowance): a start-up, one line per back-off step per task with a growing wait,
    # librdkafka's lines at most once a minute per kind. Before: about 450 lines a minute.
    assert len(lines) <= 30, "\n".join(lines)
    assert sum(REFUSED in line for line in lines) <= 8, "\n".join(lines)
    for task, waits in retry_waits(lines).items():
        assert waits == sorted(set(waits)), f"{task}: the back-off does not grow: {waits}"
    shapes = Counter(re.sub(r"\d+", "#", line.split(" librdkafka.", 1)[1]) for line in lines
                     if " librdkafka." in line)
    assert shapes and max(shapes.values()) == 1, shapes
    logs = {p.name: p.log_file.read_text(errors="replace") for p in processes}
    logs["spark and test process"] = "".join(capfd.readouterr())
    assert_no_secret(logs, secrets_of(secured_clusters, wrong))


def read_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def retry_waits(lines: list[str]) -> dict[str, list[float]]:
    """Each retrying task's announced waits in log order (``clients.retry_backoff``'s lines)."""
    waits: dict[str, list[float]] = {}
    for line in lines:
        found = RETRY.search(line)
        if found:
            waits.setdefault(found["task"], []).append(float(found["wait"]))
    return waits


def wait_for_lines(path: Path, done: Callable[[list[str]], bool], timeout_s: float) -> float | None:
    """Seconds until ``done(the log's lines)``, None after ``timeout_s``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if done(read_lines(path)):
            return time.monotonic() - began
        time.sleep(0.2)
    return None


def wait_for_line(path: Path, text: str, timeout_s: float) -> float | None:
    return wait_for_lines(path, lambda lines: any(text in line for line in lines), timeout_s)
