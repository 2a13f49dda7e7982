"""stack.local_images against the real engine: a rebuild of a tag removes the image it replaced, so test
runs do not fill the disk with untagged copies of srm-monitor."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from stack.local_images import image_id, remove_replaced

pytestmark = pytest.mark.containers


def build_scratch(engine: str, tag: str, context: Path, content: str) -> str:
    """A one-file image FROM scratch (no registry needed); its id."""
    (context / "f").write_text(content)
    (context / "Containerfile").write_text("FROM scratch\nCOPY f /f\n")
    subprocess.run([engine, "build", "-q", "-t", tag, "-f", str(context / "Containerfile"), str(context)],
                   capture_output=True, check=True, timeout=300)
    built = image_id(engine, tag)
    assert built is not None
    return built


def test_a_rebuild_removes_the_image_it_replaced(engine: tuple[str, list[str]], tmp_path: Path) -> None:
    tag = f"localhost/srm-test-rebuild-{uuid.uuid4().hex[:8]}:1"
    try:
        first = build_scratch(engine[0], tag, tmp_path, "one")
        remove_replaced(engine[0], tag, first)  # same id: a rebuild that changed nothing keeps it
        assert image_id(engine[0], first) == first
        second = build_scratch(engine[0], tag, tmp_path, "two")
        assert second != first
        remove_replaced(engine[0], tag, first)
        assert image_id(engine[0], first) is None
        assert image_id(engine[0], tag) == second
    finally:
        subprocess.run([engine[0], "rmi", "-f", tag], capture_output=True, timeout=120)


def test_no_image_before_is_nothing_to_remove(engine: tuple[str, list[str]]) -> None:
    assert image_id(engine[0], f"localhost/srm-test-absent-{uuid.uuid4().hex[:8]}:1") is None
