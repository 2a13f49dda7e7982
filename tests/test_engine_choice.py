"""The session fixtures' choice between testcontainers and local processes (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import docker_engine_available


def test_a_requested_engine_that_does_not_answer_fails_the_run_naming_the_request(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # tests/containers asks for the engine this way; it used to fall back to local jars unannounced
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    with pytest.raises(RuntimeError, match="DOCKER_HOST"):
        docker_engine_available()


@pytest.mark.parametrize("image", ["SRM_KAFKA_IMAGE", "SRM_REDIS_IMAGE"])
def test_naming_an_image_asks_for_the_engine_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 image: str) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    monkeypatch.setenv(image, "localhost/srm-image:1")
    with pytest.raises(RuntimeError, match=image):
        docker_engine_available()
