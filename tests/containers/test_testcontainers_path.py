"""The session fixtures' testcontainers path (tests/conftest.py), run for real once: an e2e test whose Kafka
clusters and Redis come from the local images through the engine's Docker-compatible socket (podman's
`podman system service`), in a pytest of its own so the rest of the suite keeps its local processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stack.local_images import image_builds
from tests.containers.compose_stack import wait_for

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]
E2E_TEST = "tests/e2e/test_record_count_end_to_end.py"
RUN_TIMEOUT_S = 1500.0


def images_containers(engine: str, *images: str) -> list[str]:
    filters = [arg for image in images for arg in ("--filter", f"ancestor={image}")]
    listed = subprocess.run([engine, "ps", "-a", "-q", "--no-trunc", *filters], capture_output=True,
                            text=True, timeout=120, check=True)
    return listed.stdout.split()


def local_image(prefix: str) -> str:
    return next(b.image for b in image_builds() if b.image.startswith(prefix))


@pytest.fixture(scope="module")
def docker_host(engine: tuple[str, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DOCKER_HOST of a Docker-compatible API: podman's service on a socket of this test's, or Docker's."""
    if engine[0] == "docker":
        yield os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        return
    socket = tmp_path_factory.mktemp("podman") / "podman.sock"
    service = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(f"podman's API on {socket}", lambda: service.poll() is None and socket.exists(), 120, 1.0,
                 describe=lambda: f"podman system service exit code: {service.poll()}")
        yield f"unix://{socket}"
    finally:
        service.terminate()
        try:
            service.wait(30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(30)


def test_kafka_and_redis_fixtures_run_through_testcontainers_on_the_local_images(
        engine: tuple[str, list[str]], local_images: dict[str, float], docker_host: str):
    kafka, redis = local_image("localhost/srm-kafka:"), local_image("localhost/srm-redis:")
    env = {**os.environ, "DOCKER_HOST": docker_host, "SRM_KAFKA_IMAGE": kafka, "SRM_REDIS_IMAGE": redis,
           # Ryuk (testcontainers' reaper) is an image of its own no registry serves here; the fixtures
           # stop their containers themselves.
           "TESTCONTAINERS_RYUK_DISABLED": "true",
           # The ports are published on this host's loopback. Left to itself, testcontainers sees that it
           # runs inside a container and asks for the container's gateway, which podman's API lacks.
           "TESTCONTAINERS_CONNECTION_MODE": "docker_host", "TC_HOST": "127.0.0.1"}
    before = set(images_containers(engine[0], kafka, redis))
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", E2E_TEST],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    output = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{E2E_TEST} through testcontainers failed:\n{output}"
    assert f"Kafka east through testcontainers ({kafka})" in done.stdout, output
    assert f"Redis through testcontainers ({redis})" in done.stdout, output
    assert "1 passed" in done.stdout, output
    left = set(images_containers(engine[0], kafka, redis)) - before
    took = time.monotonic() - began
    assert not left, f"testcontainers left containers behind (run of {took:.0f} s): {left}"
