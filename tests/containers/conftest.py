"""Fixtures of the container tests: the engine, the local images (built once a session, on the engine's
layer cache), and one compose project per module, removed with its volumes whatever happened."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stack.local_images import build_all
from tests.conftest import announce
from tests.containers.compose_stack import ComposeStack, find_engine


@pytest.fixture(scope="session")
def engine() -> tuple[str, list[str]]:
    found = find_engine()
    if isinstance(found, str):
        pytest.skip(f"no container engine runs here ({found})")
    return found


@pytest.fixture(scope="session")
def local_images(engine: tuple[str, list[str]], pytestconfig: pytest.Config,
                 tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    """Image -> seconds its build took this time (the base image: 0 when it existed)."""
    log = tmp_path_factory.mktemp("images") / "build.log"
    try:
        times = build_all(engine[0], log)
    except RuntimeError as exc:
        pytest.fail(f"{exc}\n{log.read_text(errors='replace')[-4000:] if log.exists() else ''}")
    announce(pytestconfig, "images built with " + engine[0] + ": " +
             ", ".join(f"{image} {seconds:.0f} s" for image, seconds in times.items()))
    return times


@pytest.fixture(scope="module")
def compose_stack(engine: tuple[str, list[str]], local_images: dict[str, float],
                  pytestconfig: pytest.Config) -> Iterator[ComposeStack]:
    stack = ComposeStack(engine[0], engine[1], topics=("orders",))
    announce(pytestconfig, f"compose project {stack.project} ({' '.join(engine[1])}), ports {stack.ports}")
    try:
        stack.up()
        yield stack
    finally:
        left = stack.purge()
        assert not left, f"compose project {stack.project} left behind: {left}"
