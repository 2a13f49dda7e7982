"""Builds the images of deploy/compose.local.yaml where no registry serves compose.yaml's, one at a time.

First the Debian base (deploy/local/base-image.sh: debootstrap, imported once), then each distinct image
the override names, with the engine's layer cache: a second run rebuilds nothing that did not change.
One by one rather than through `compose build`, which builds the seven services sharing the srm-monitor
image at the same time. `python -m stack.local_images [--engine podman|docker]` (as root, from a checkout).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose.yaml"
OVERRIDE = ROOT / "deploy" / "compose.local.yaml"
BASE_SCRIPT = ROOT / "deploy" / "local" / "base-image.sh"
BUILD_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class ImageBuild:
    image: str
    dockerfile: str
    args: tuple[tuple[str, str], ...]

    def command(self, engine: str) -> list[str]:
        build_args = [f"--build-arg={name}={value}" for name, value in self.args]
        # podman's default (OCI) image format has no HEALTHCHECK: it would be dropped without a word.
        image_format = ["--format=docker"] if engine == "podman" else []
        return [engine, "build", *image_format, "-t", self.image, "-f", str(ROOT / self.dockerfile),
                *build_args, str(ROOT)]


def image_builds(override: Path = OVERRIDE) -> list[ImageBuild]:
    """The override's distinct images, in the order it names them."""
    builds: dict[str, ImageBuild] = {}
    for service in yaml.safe_load(override.read_text())["services"].values():
        build = service.get("build")
        if build is None or service["image"] in builds:
            continue
        if build.get("context", ".") != ".":
            raise ValueError(f"{override}: {service['image']} builds from {build['context']}, not the root")
        builds[service["image"]] = ImageBuild(service["image"], build.get("dockerfile", "Dockerfile"),
                                              tuple(sorted(build.get("args", {}).items())))
    return list(builds.values())


def base_image(builds: list[ImageBuild]) -> str:
    bases = {value for build in builds for name, value in build.args if name == "BASE_IMAGE"}
    if len(bases) != 1:
        raise ValueError(f"the override's images should share one BASE_IMAGE, found {sorted(bases)}")
    return bases.pop()


def run_timed(command: list[str], engine: str, log: Path | None) -> float:
    began = time.monotonic()
    env = {**os.environ, "CONTAINER_ENGINE": engine}
    with open(log, "ab") if log else contextlib.nullcontext() as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT if out else None,
                              timeout=BUILD_TIMEOUT_S, env=env)
    if done.returncode != 0:
        where = f" (log: {log})" if log else ""
        raise RuntimeError(f"`{' '.join(command)}` exited {done.returncode}{where}")
    return time.monotonic() - began


def image_id(engine: str, image: str) -> str | None:
    """The id the tag names now, None when no image has it."""
    done = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def remove_replaced(engine: str, image: str, before: str | None) -> None:
    """Removes the image a rebuild took the tag from: each rebuild of srm-monitor left ~1.5 GB untagged
    behind it (a disk filled in a day of test runs). An image a container still uses stays."""
    if before is not None and before != image_id(engine, image):
        subprocess.run([engine, "rmi", before], capture_output=True, timeout=120)


def build_all(engine: str = "podman", log: Path | None = None) -> dict[str, float]:
    """Image -> seconds its build took, the base first."""
    builds = image_builds()
    base = base_image(builds)
    times = {base: run_timed([str(BASE_SCRIPT), base], engine, log)}
    for build in builds:
        before = image_id(engine, build.image)
        times[build.image] = run_timed(build.command(engine), engine, log)
        remove_replaced(engine, build.image, before)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="podman", help="podman (default) or docker")
    args = parser.parse_args()
    try:
        times = build_all(args.engine)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"stack.local_images: {exc}", file=sys.stderr)
        return 1
    for image, seconds in times.items():
        print(f"{image}: {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
