"""Session fixtures: real Kafka clusters, Redis and one SparkSession.

With a Docker engine they come from testcontainers; without one, the same fixtures start local
processes from the Maven Central jars and the Debian redis-server (the `stack` package). A missing
part fails the test with a message naming it; nothing is skipped. `SRM_KAFKA_IMAGE` and
`SRM_REDIS_IMAGE` name other images than the official ones (the local builds of deploy/compose.local.yaml
where no registry answers; tests/containers runs an e2e test that way through podman's socket).

A test is marked `integration` by what it uses, not by hand: whatever requests a fixture of
REAL_PROCESS_FIXTURES (directly or through another fixture) gets the mark, and a test that starts a
process itself (a RedisServer, redis-server, promtool, keytool, java, a part's console script) requests
`external_processes`. The rest is `make check`'s tier, where starting a process is an error naming the
test (`_no_process_in_the_fast_tier`).
"""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from stack.jars import kafka_jars, kafka_version
from stack.kafka_cluster import PORT_SLICE_ENV, KafkaCluster, KafkaClusters
from stack.pki import StackPki
from stack.redis_server import RedisServer
from stack.secured_listeners import BrokerSecurity

LOG = logging.getLogger(__name__)

CLUSTER_ALIASES = ["east", "west"]
REDIS_IMAGE = os.environ.get("SRM_REDIS_IMAGE", "redis:7.0")
# Fixtures that start (or stand for) a real process; the fixtures of tests/*/conftest.py that start one
# are here too, those built on these need not be.
REAL_PROCESS_FIXTURES = frozenset({
    "external_processes", "docker_engine", "kafka_clusters", "secured_clusters", "guarded_west",
    "redis_url", "spark", "mirror_probe", "north", "north_cluster", "authz_clusters", "engine",
    "local_images", "compose_stack",
})
SLOW_MARKERS = ("integration", "e2e", "interop", "containers")


# Side by side (`make test` runs pytest-xdist's workers, each with its own session clusters, Redis and
# SparkSession): a worker takes a whole file, so a module's fixtures start once and its tests keep
# their order, and tests/containers is one unit (its files share the images the engine builds once).
CONTAINER_TESTS = "tests/containers/"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if REAL_PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    if getattr(config, "workerinput", None) is not None:
        # The workers take files in this order: the long ones (containers, then every file that starts
        # processes) first and the fast tier last, so that the workers finish at about the same time.
        slow = {item.path for item in items if any(item.get_closest_marker(name) for name in SLOW_MARKERS)}
        items.sort(key=lambda item: (not item.nodeid.startswith(CONTAINER_TESTS), item.path not in slow))


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # Ports each worker hands out are its own (stack.kafka_cluster.free_port).
        os.environ[PORT_SLICE_ENV] = f"{int(workerinput['workerid'][2:])}/{workerinput['workercount']}"


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (-p no:xdist, a venv without it) runs as before
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") not in ("load", "loadfile"):
        return None  # another --dist asked for by name
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # keep the order of pytest_collection_modifyitems

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return CONTAINER_TESTS if nodeid.startswith(CONTAINER_TESTS) else super()._split_scope(nodeid)

    return FileScheduling(config, log)


@pytest.fixture(scope="session")
def external_processes() -> None:
    """Requested by a test that starts a process itself: it is an integration test then."""


@pytest.fixture(autouse=True)
def _no_process_in_the_fast_tier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test without a real-process fixture that starts a process fails, naming what to request."""
    if any(request.node.get_closest_marker(name) for name in SLOW_MARKERS):
        return

    def refused(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{request.node.nodeid} starts a process outside the integration tier: request "
                           "the `external_processes` fixture (tests/conftest.py)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", refused)


# How long a Docker-compatible engine may take to answer its first ping. podman's API service on a
# busy machine took 37 s to answer once (load 11, nice 19), so a short timeout here took a slow engine
# for an absent one. An absent engine (no socket) is refused at once whatever this says.
ENGINE_PING_TIMEOUT_S = 180
# Naming an engine or an image asks for the testcontainers path: it is then not chosen by a probe.
ENGINE_REQUESTS = ("DOCKER_HOST", "SRM_KAFKA_IMAGE", "SRM_REDIS_IMAGE")


def docker_engine_available() -> bool:
    """True when a Docker-compatible engine answers. When the environment asks for one
    (ENGINE_REQUESTS), an engine that does not answer fails the run, naming why: the suite never
    changes its path silently."""
    requested = {name: os.environ[name] for name in ENGINE_REQUESTS if os.environ.get(name)}
    try:
        import docker

        docker.from_env(timeout=ENGINE_PING_TIMEOUT_S).ping()
        return True
    except Exception as exc:
        if requested:
            raise RuntimeError(f"the environment asks for testcontainers ({requested}) but the Docker engine "
                               f"did not answer within {ENGINE_PING_TIMEOUT_S} s: {exc}") from exc
        return False


def announce(config: pytest.Config, message: str) -> None:
    """A line in the test log itself (not captured): CI logs show what really started."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    # Read from the config, not the environment: a pytest a worker starts inherits its variables.
    workerinput = getattr(config, "workerinput", None)
    with capture.global_and_fixture_disabled():
        if workerinput is not None:  # a pytest-xdist worker's terminal goes nowhere; its stderr is the run's
            sys.stderr.write(f"[stack {workerinput['workerid']}] {message}\n")
            sys.stderr.flush()
        else:
            reporter.write_line(f"[stack] {message}")


@pytest.fixture(scope="session")
def docker_engine() -> bool:
    available = docker_engine_available()
    LOG.info("Docker engine %s", "answers: using testcontainers" if available else
             "absent: starting local processes")
    return available


@pytest.fixture(scope="session")
def kafka_clusters(docker_engine: bool, pytestconfig: pytest.Config) -> Iterator[dict[str, str]]:
    """Alias -> bootstrap servers of independent single-node KRaft clusters."""
    if docker_engine:
        from stack.kafka_container import ApacheKafkaContainer

        # The official apache/kafka image of the stack's own Kafka version (stack/kafka_version.py).
        image = os.environ.get("SRM_KAFKA_IMAGE")
        containers = {alias: ApacheKafkaContainer(image) for alias in CLUSTER_ALIASES}
        try:
            for alias, container in containers.items():
                container.start()
                announce(pytestconfig, f"Kafka {alias} through testcontainers ({container.image}) on "
                                       f"{container.bootstrap_servers}")
            yield {alias: c.bootstrap_servers for alias, c in containers.items()}
        finally:
            for container in containers.values():
                container.stop()
        return
    began = time.monotonic()
    clusters = KafkaClusters(CLUSTER_ALIASES).start()
    for alias, cluster in clusters.clusters.items():
        announce(pytestconfig, f"Apache Kafka {kafka_version()} broker {alias} started from "
                               f"{kafka_jars()} on {cluster.bootstrap_servers} "
                               f"in {cluster.started_in_s:.1f} s")
    announce(pytestconfig, f"{len(clusters.clusters)} clusters up in {time.monotonic() - began:.1f} s")
    try:
        yield {alias: clusters.bootstrap(alias) for alias in CLUSTER_ALIASES}
    finally:
        clusters.cleanup()


@pytest.fixture(scope="session")
def secured_clusters(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[KafkaClusters]:
    """east and west with SASL/SCRAM, TLS, SASL_SSL and mTLS listeners besides PLAINTEXT; the CA, the
    certificates and the SCRAM password are made for this run. Always local processes: the listeners,
    stores and SCRAM user are the stack's own (`stack.secured_listeners`), with or without Docker."""
    pki = StackPki(tmp_path_factory.mktemp("pki")).create()
    clusters = KafkaClusters(CLUSTER_ALIASES, tmp_path_factory.mktemp("secured-kafka"),
                             security=BrokerSecurity(pki)).start()
    for alias, cluster in clusters.clusters.items():
        announce(pytestconfig, f"secured Apache Kafka {kafka_version()} broker {alias}: "
                               f"{sorted(cluster.secured_ports)} in {cluster.started_in_s:.1f} s")
    try:
        yield clusters
    finally:
        clusters.cleanup()


@pytest.fixture(scope="session")
def north_cluster(pytestconfig: pytest.Config) -> Iterator[str]:
    """A third plain cluster beside kafka_clusters (fan-in, three sites), started on first use and shared:
    its bootstrap servers. (The interop tests keep their own: Apache's readers stop at a foreign record.)"""
    clusters = KafkaClusters(["north"]).start()
    announce(pytestconfig, f"Apache Kafka broker north on {clusters.bootstrap('north')} in "
                           f"{clusters.clusters['north'].started_in_s:.1f} s")
    try:
        yield clusters.bootstrap("north")
    finally:
        clusters.cleanup()


@pytest.fixture(scope="session")
def guarded_west(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A west that enforces ACLs (KRaft's StandardAuthorizer) and takes a SCRAM login on its secured
    listeners; PLAINTEXT clients are its super user. Grant with `tests.guarded_target.Grants`."""
    pki = StackPki(tmp_path_factory.mktemp("guarded-pki")).create()
    cluster = KafkaCluster("west", tmp_path_factory.mktemp("guarded-west"), authorizer=True,
                           security=BrokerSecurity(pki)).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_url(docker_engine: bool, pytestconfig: pytest.Config) -> Iterator[str]:
    if docker_engine:
        from testcontainers.community.redis import RedisContainer

        from stack.kafka_cluster import free_port
        from stack.kafka_container import publish_on_loopback

        container = RedisContainer(REDIS_IMAGE)
        publish_on_loopback(container, 6379, free_port())
        try:
            container.start()  # inside the try: a container that never got ready is removed too
            url = f"redis://127.0.0.1:{container.get_exposed_port(6379)}/0"
            announce(pytestconfig, f"Redis through testcontainers ({REDIS_IMAGE}) on {url}")
            yield url
        finally:
            container.stop()
        return
    server = RedisServer().start()
    announce(pytestconfig, f"redis-server started on {server.url}")
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def spark(pytestconfig: pytest.Config):
    from aggregator.session import build_session

    began = time.monotonic()
    session = build_session("local[2]", "srm-tests")
    announce(pytestconfig, f"SparkSession {session.version} (local[2]) started in "
                           f"{time.monotonic() - began:.1f} s")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()
