"""Fixtures of the interop tests: Apache's own MirrorMaker 2 classes, asked through MirrorProbe.java.

The probe is compiled once per session against the Kafka jars the project resolves (stack/jars.py),
then each call is one short JVM printing one JSON object.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stack.jars import kafka_jars
from stack.kafka_cluster import KafkaCluster, KafkaClusters

JAVA_DIR = Path(__file__).parent / "java"
PROBE_TIMEOUT_S = 120

MirrorProbe = Callable[..., dict]


@pytest.fixture(scope="session")
def mirror_probe(tmp_path_factory: pytest.TempPathFactory) -> MirrorProbe:
    """`probe("client"|"translate"|"decode", bootstrap, ...)` -> the probe's JSON answer."""
    classes = tmp_path_factory.mktemp("mirror-probe")
    jars = f"{kafka_jars()}/*"
    source = str(JAVA_DIR / "MirrorProbe.java")
    built = subprocess.run(["javac", "-nowarn", "-cp", jars, "-d", str(classes), source],
                           capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    assert built.returncode == 0, f"MirrorProbe.java does not compile:\n{built.stderr[-3000:]}"

    def probe(*args: str) -> dict:
        done = subprocess.run(
            ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{classes}:{jars}",
             f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2-stderr.properties'}", "MirrorProbe", *args],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        assert done.returncode == 0, f"MirrorProbe {' '.join(args)} failed:\n{done.stderr[-3000:]}"
        return json.loads(done.stdout.strip().splitlines()[-1])

    return probe


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """east and west of the interop tests' own, started on first use: alias -> bootstrap servers.

    Apache's readers (RemoteClusterUtils, the probe's deserializers) read whole internal topics and
    stop at the first record they cannot decode, and the driver's tests write such records into the
    shared clusters' checkpoints and offset-syncs topics on purpose."""
    clusters = KafkaClusters(["east", "west"], root=tmp_path_factory.mktemp("interop-kafka")).start()
    try:
        yield {alias: clusters.bootstrap(alias) for alias in ("east", "west")}
    finally:
        clusters.cleanup()


@pytest.fixture(scope="module")
def north(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A third cluster, for fan-out and two-hop heartbeats."""
    clusters = KafkaClusters(["north"], root=tmp_path_factory.mktemp("north")).start()
    try:
        yield clusters.bootstrap("north")
    finally:
        clusters.cleanup()


@pytest.fixture(scope="session")
def authz_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """east and west with KRaft's StandardAuthorizer (ACLs enforced; PLAINTEXT clients are super
    users), started on first use: alias -> bootstrap servers."""
    root = tmp_path_factory.mktemp("authz-kafka")
    clusters = [KafkaCluster(alias, root / alias, authorizer=True) for alias in ("east", "west")]
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(KafkaCluster.start, clusters))
        yield {cluster.alias: cluster.bootstrap_servers for cluster in clusters}
    finally:
        for cluster in clusters:
            cluster.stop()
