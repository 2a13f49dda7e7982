"""The Dockerfile and deploy/compose.local.yaml as files: what a build needs, what the override may change.

tests/containers builds and runs them; these catch the same mistakes without an engine, on every run
(a package added to pyproject.toml but not to the image is how the container path broke once).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from stack.container_health import config_path, part_of
from stack.kafka_version import kafka_release
from stack.local_images import OVERRIDE, base_image, image_builds

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def override() -> dict:
    return yaml.safe_load(OVERRIDE.read_text())


def test_the_image_holds_every_package_the_project_ships():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY\s+(\w+)\s+\1\s*$", DOCKERFILE, re.MULTILINE))
    assert packages <= copied, f"the Dockerfile does not copy {sorted(packages - copied)}"


def test_the_base_is_an_argument_defaulting_to_the_official_python_311_slim_image():
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11\.\d+-slim-bookworm$", DOCKERFILE, re.MULTILINE)
    stages = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", DOCKERFILE, re.MULTILINE))
    assert set(re.findall(r"^FROM\s+(\S+)", DOCKERFILE, re.MULTILINE)) - stages == {"${BASE_IMAGE}"}


def test_the_parts_run_as_a_non_root_user_with_a_healthcheck():
    final_stage = DOCKERFILE.rsplit("\nFROM ", 1)[1]
    users = re.findall(r"^USER\s+(\S+)", final_stage, re.MULTILINE)
    assert users and users[-1] not in {"root", "0"}
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD \[\"python\", \"-m\", \"stack.container_health\"\]",
                     final_stage, re.MULTILINE)


@pytest.mark.parametrize("command, part, config", [
    (["/opt/srm/venv/bin/python", "/opt/srm/venv/bin/srm-aggregator", "--config", "/etc/srm/a.properties"],
     "srm-aggregator", "/etc/srm/a.properties"),
    (["srm-service", "--config=/etc/s.properties"], "srm-service", "/etc/s.properties"),
    (["/opt/kafka/bin/run"], None, None),
])
def test_the_healthcheck_tells_the_parts_apart_by_the_main_process(command, part, config):
    assert (part_of(command), config_path(command)) == (part, config)


def test_the_override_only_swaps_images_for_local_builds(compose, override):
    assert set(override["services"]) <= set(compose["services"])
    for name, service in override["services"].items():
        assert set(service) <= {"image", "build", "profiles"}, name
        if "image" in service:
            assert service["image"].startswith("localhost/") and "build" in service, name


def test_the_local_images_are_the_same_software_at_the_same_versions(compose, override):
    local = {name: service["image"] for name, service in override["services"].items() if "image" in service}
    upstream = {name: compose["services"][name]["image"] for name in local}
    for name in ("kafka-east", "kafka-west"):
        assert local[name].rsplit(":", 1)[1] == upstream[name].rsplit(":", 1)[1] == kafka_release()
    for name in ("redis-east", "redis-west"):
        assert local[name].rsplit(":", 1)[1] == upstream[name].rsplit(":", 1)[1]
    for name in ("driver-east", "service-west", "gateway"):
        assert local[name].rsplit(":", 1)[1] == upstream[name].rsplit(":", 1)[1]
    # No registry serves Grafana here: the override parks it in a profile `up` does not start.
    assert override["services"]["grafana"] == {"profiles": ["grafana"]}


def test_the_local_images_build_once_each_from_one_debian_base():
    builds = image_builds()
    assert len({b.image for b in builds}) == len(builds) == 4
    assert base_image(builds) == "localhost/srm-debian:bookworm"
    for build in builds:
        assert (ROOT / build.dockerfile).is_file(), build


def test_podman_builds_in_docker_format_which_keeps_the_healthcheck():
    (srm,) = [b for b in image_builds() if b.dockerfile == "Dockerfile"]
    assert "--format=docker" in srm.command("podman")
    assert not any(arg.startswith("--format") for arg in srm.command("docker"))
