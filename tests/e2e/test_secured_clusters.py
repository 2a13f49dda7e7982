"""Secured clusters end to end: SASL/SCRAM, TLS (PEM and JKS trust stores), SASL_SSL and mTLS.

The properties file carries SRM's Java keys (``east.sasl.jaas.config``, ``east.ssl.truststore.*``…) as
an enterprise user writes them. The driver (librdkafka rendering), the Spark rollup query built by the
aggregator's own ``query_specs`` (Java rendering) and the service all talk to the secured listeners of
real brokers (``secured_clusters``); records produced on east come back as record_count over HTTP. A
wrong password is named at once, reported as FAILED through the API, and costs a bounded number of log
lines. No secret appears in any log line of these tests.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from aggregator.__main__ import query_specs
from aggregator.query import start_rollup_query
from clients.client_renderings import check_client_configs
from contract.config import load_config
from stack import srm_properties
from stack.kafka_cluster import KafkaClusters, free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.secured_listeners import client_properties
from tests.e2e.http_polling import poll_json

pytestmark = pytest.mark.e2e

N = 200
PARTITIONS = 2
REFUSED = "east: SASL authentication failed (SCRAM-SHA-512): invalid credentials"

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



@pytest.mark.parametrize("mode_id", list(MODES))
def test_record_count_flows_through_secured_clusters(mode_id: str, secured_clusters: KafkaClusters,
                                                     redis_url: str, spark, tmp_path: Path, capfd):
    mode, trust, key_store = MODES[mode_id]
    config_path = write_config(tmp_path / "srm.properties", secured_clusters, mode, trust, key_store,
                               redis_url)
    config = load_config(config_path)
    check_client_configs(config, ("java",))  # what srm-aggregator checks at start-up
    spec = query_specs(config)[0]
    port = config.setting("service.port")
    topic = f"orders-{mode_id.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    started_ms = int(time.time() * 1000) - 60_000
    processes, query = [], None
    try:
        processes = start_processes(config_path, tmp_path, ("driver", "service"))
        query = start_rollup_query(spark, spec)
        wait_for_port(port, 30, processes[-1].process)
        produce_plain(secured_clusters.bootstrap("east"), topic, N)
        url = f"http://127.0.0.1:{port}/v2/topic-metrics/east/west/{topic}/record_count?from={started_ms}"
        answer = poll_json(url, lambda a: a["value"] == N, 120)
        assert answer is not None and answer["value"] == N, (
            f"record_count over {mode_id}: {answer}; query: {query.exception() if query else None}")
        replication = requests.get(f"http://127.0.0.1:{port}/v2/replications/east/west", timeout=10).json()
        assert replication["state"] != "FAILED", replication
    finally:
        if query is not None:
            query.stop()
        for process in processes:
            process.stop()
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
        began = time.monotonic()
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

        time.sleep(max(0.0, 60 - (time.monotonic() - began)))
        lines = read_lines(driver.log_file)
    finally:
        if query is not None:
            query.stop()
        for process in processes:
            process.stop()
    # One minute of a refused login: a start-up, one line per back-off step per task, librdkafka's
    # lines at most once a minute per kind. Before: about 450 lines a minute.
    assert len(lines) <= 30, "\n".join(lines)
    assert sum(REFUSED in line for line in lines) <= 8, "\n".join(lines)
    logs = {p.name: p.log_file.read_text(errors="replace") for p in processes}
    logs["spark and test process"] = "".join(capfd.readouterr())
    assert_no_secret(logs, secrets_of(secured_clusters, wrong))


def read_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []


def wait_for_line(path: Path, text: str, timeout_s: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if any(text in line for line in read_lines(path)):
            return time.monotonic() - began
        time.sleep(0.2)
    return None
