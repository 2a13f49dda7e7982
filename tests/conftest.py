"""Session fixtures: real Kafka clusters, Redis and one SparkSession.

With a Docker engine they come from testcontainers; without one, the same fixtures start local
processes from the Maven Central jars and the Debian redis-server (the `stack` package). A missing
part fails the test with a message naming it; nothing is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from stack.kafka_cluster import KafkaClusters
from stack.redis_server import RedisServer

LOG = logging.getLogger(__name__)

CLUSTER_ALIASES = ["east", "west"]
# Confluent Platform 8.0 is Apache Kafka 4.0 in KRaft mode; testcontainers' with_kraft() knows its tags.
KAFKA_IMAGE = "confluentinc/cp-kafka:8.0.0"
REDIS_IMAGE = "redis:7.0"


def docker_engine_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def docker_engine() -> bool:
    available = docker_engine_available()
    LOG.info("Docker engine %s", "answers: using testcontainers" if available else
             "absent: starting local processes")
    return available


@pytest.fixture(scope="session")
def kafka_clusters(docker_engine: bool) -> Iterator[dict[str, str]]:
    """Alias -> bootstrap servers of independent single-node KRaft clusters."""
    if docker_engine:
        from testcontainers.community.kafka import KafkaContainer

        containers = {alias: KafkaContainer(KAFKA_IMAGE).with_kraft().start() for alias in CLUSTER_ALIASES}
        yield {alias: c.get_bootstrap_server() for alias, c in containers.items()}
        for container in containers.values():
            container.stop()
        return
    clusters = KafkaClusters(CLUSTER_ALIASES).start()
    try:
        yield {alias: clusters.bootstrap(alias) for alias in CLUSTER_ALIASES}
    finally:
        clusters.cleanup()


@pytest.fixture(scope="session")
def redis_url(docker_engine: bool) -> Iterator[str]:
    if docker_engine:
        from testcontainers.community.redis import RedisContainer

        container = RedisContainer(REDIS_IMAGE).start()
        host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
        yield f"redis://{host}:{port}/0"
        container.stop()
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def spark():
    from aggregator.session import build_session

    session = build_session("local[2]", "srm-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()
