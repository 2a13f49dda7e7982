"""One Kafka version: the stack's broker jars, compose.yaml's image and the testcontainers image agree."""

from __future__ import annotations

from pathlib import Path

import yaml

from stack.jars import kafka_version
from stack.kafka_container import ApacheKafkaContainer, broker_environment
from stack.kafka_version import kafka_image, kafka_release

ROOT = Path(__file__).resolve().parents[2]


def compose_kafka_services() -> dict[str, dict]:
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    return {name: service for name, service in services.items() if name.startswith("kafka-")}


def test_the_stack_runs_the_version_the_pom_names():
    assert kafka_version() == kafka_release()


def test_compose_runs_the_official_image_of_that_version():
    services = compose_kafka_services()
    assert services and {s["image"] for s in services.values()} == {kafka_image()}
    assert kafka_image() == f"apache/kafka:{kafka_release()}"


def test_testcontainers_run_the_same_image_configured_as_compose_configures_it():
    container = ApacheKafkaContainer()
    assert container.image == kafka_image()
    ours = broker_environment("localhost", container.host_port)
    for service in compose_kafka_services().values():
        theirs = {k: str(v) for k, v in service["environment"].items()}
        shared = set(ours) - {"KAFKA_ADVERTISED_LISTENERS", "KAFKA_HEAP_OPTS"}
        assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}
