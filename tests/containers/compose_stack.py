"""compose.yaml + deploy/compose.local.yaml under one unique project name, driven as a user drives it.

Works with podman (podman-compose) or Docker (`docker compose`). Waits are conditions polled until a
generous deadline, and a failed wait says what it last saw plus the state and the logs of the
containers. `purge` removes everything carrying the project's name, whatever state a failure left.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import requests

from stack.kafka_cluster import free_port
from stack.local_images import COMPOSE_FILE, OVERRIDE

T = TypeVar("T")
KAFKA_SERVICES = ("kafka-east", "kafka-west")
STATE_SERVICES = (*KAFKA_SERVICES, "redis-east", "redis-west")
SRM_PARTS = ("driver-east", "aggregator-east", "service-east", "driver-west", "aggregator-west",
             "service-west", "gateway")
COMMAND_TIMEOUT_S = 900.0


class WaitTimeout(AssertionError):
    pass


def find_engine() -> tuple[str, list[str]] | str:
    """(engine, compose command), or why no engine can run the stack here."""
    reasons = []
    for engine in ("podman", "docker"):
        if shutil.which(engine) is None:
            reasons.append(f"no `{engine}` on PATH")
            continue
        try:
            info = subprocess.run([engine, "info"], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            reasons.append(f"`{engine} info` did not answer in 120 s")
            continue
        if info.returncode != 0:
            reasons.append(f"`{engine} info` failed: {(info.stderr or info.stdout).strip()[-200:]}")
            continue
        compose = compose_command(engine)
        if compose is None:
            reasons.append(f"{engine} runs, but no compose tool for it (pip install podman-compose, or "
                           f"Docker's compose plugin)")
            continue
        return engine, compose
    return "; ".join(reasons)


def compose_command(engine: str) -> list[str] | None:
    if engine == "docker":
        done = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60)
        return ["docker", "compose"] if done.returncode == 0 else None
    beside_python = Path(sys.executable).parent / "podman-compose"
    found = str(beside_python) if beside_python.exists() else shutil.which("podman-compose")
    return [found] if found else None


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float = 3.0,
             describe: Callable[[], str] = lambda: "") -> T:
    """probe's first truthy answer; its exceptions count as 'not yet' and the last one is reported."""
    deadline, last = time.monotonic() + timeout_s, "nothing yet"
    while True:
        try:
            answer = probe()
            if answer:
                return answer
            last = repr(answer)
        except (OSError, ValueError, KeyError, subprocess.SubprocessError, requests.RequestException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{what}: not within {timeout_s:.0f} s; last seen: {last[:1500]}\n{describe()}")
        time.sleep(every_s)


@dataclass
class ComposeStack:
    engine: str
    compose: list[str]
    project: str = field(default_factory=lambda: f"srmct{os.getpid()}x{secrets.token_hex(3)}")
    ports: dict[str, int] = field(default_factory=lambda: {
        name: free_port() for name in ("gateway", "east", "west", "prometheus", "grafana")})
    # Made on both clusters before the drivers start (they look for new topics every 10 minutes).
    topics: tuple[str, ...] = ()

    @property
    def env(self) -> dict[str, str]:
        ports = {f"SRM_{name.upper()}_PORT": str(port) for name, port in self.ports.items()}
        return {**os.environ, "SRM_PUBLISH_ADDRESS": "127.0.0.1", **ports}

    def url(self, name: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    def run_compose(self, *args: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        command = [*self.compose, "-p", self.project, "-f", str(COMPOSE_FILE), "-f", str(OVERRIDE), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=self.env,
                              cwd=COMPOSE_FILE.parent)
        if done.returncode != 0:
            raise AssertionError(f"`{' '.join(args)}` exited {done.returncode}:\n{done.stdout[-3000:]}"
                                 f"\n{done.stderr[-3000:]}\n{self.describe()}")
        return done.stdout

    def engine_run(self, *args: str, timeout_s: float = 120.0, check: bool = True) -> str:
        done = subprocess.run([self.engine, *args], capture_output=True, text=True, timeout=timeout_s)
        if check and done.returncode != 0:
            raise subprocess.SubprocessError(f"`{self.engine} {' '.join(args[:4])}` exited "
                                             f"{done.returncode}: {(done.stderr or done.stdout)[-800:]}")
        return done.stdout

    @property
    def label(self) -> str:
        return f"label=com.docker.compose.project={self.project}"

    def container(self, service: str) -> str:
        ids = self.engine_run("ps", "-a", "-q", "--filter", self.label,
                              "--filter", f"label=com.docker.compose.service={service}").split()
        if len(ids) != 1:
            raise subprocess.SubprocessError(f"{len(ids)} containers for service {service}")
        return ids[0]

    def state(self, service: str) -> dict[str, Any]:
        (inspected,) = json.loads(self.engine_run("inspect", self.container(service)))
        return {"status": inspected["State"]["Status"], "pid": inspected["State"]["Pid"],
                "started": inspected["State"]["StartedAt"], "restarts": inspected.get("RestartCount", 0)}

    def exec(self, service: str, *command: str, timeout_s: float = 180.0, check: bool = True) -> str:
        return self.engine_run("exec", self.container(service), *command, timeout_s=timeout_s, check=check)

    def up(self, *services: str) -> None:
        """Kafka and Redis first, until both brokers answer (podman before 4.6 cannot wait for a
        healthcheck itself), then the rest: what `depends_on: service_healthy` does under Docker."""
        self.run_compose("up", "-d", *STATE_SERVICES)
        for kafka in KAFKA_SERVICES:
            wait_for(f"{kafka} answering kafka-topics.sh --list",
                     functools.partial(self._kafka_answers, kafka), 300, describe=self.describe)
            for topic in self.topics:
                self.exec(kafka, "/opt/kafka/bin/kafka-topics.sh", "--bootstrap-server", "localhost:9092",
                          "--create", "--if-not-exists", "--topic", topic, "--partitions", "2")
        self.run_compose("up", "-d", *services)

    def _kafka_answers(self, kafka: str) -> bool:
        done = subprocess.run([self.engine, "exec", self.container(kafka), "/opt/kafka/bin/kafka-topics.sh",
                               "--bootstrap-server", "localhost:9092", "--list"], capture_output=True,
                              timeout=180)
        return done.returncode == 0

    def healthy(self, service: str) -> bool:
        """The image's HEALTHCHECK passes: run now under podman (no systemd timer runs it here), the
        engine's own verdict under Docker."""
        if self.engine == "podman":
            return subprocess.run(["podman", "healthcheck", "run", self.container(service)],
                                  capture_output=True, timeout=120).returncode == 0
        status = self.engine_run("inspect", "-f", "{{.State.Health.Status}}", self.container(service))
        return status.strip() == "healthy"

    def down(self) -> None:
        self.run_compose("down")

    def describe(self) -> str:
        """Every container's state and its last log lines: what a failed wait needs to be understood."""
        try:
            listing = self.engine_run("ps", "-a", "--filter", self.label,
                                      "--format", "{{.Names}} {{.Status}}", check=False)
            lines = [f"containers of {self.project}:\n{listing}"]
            for name in listing.split("\n"):
                if name.split():
                    logs = subprocess.run([self.engine, "logs", "--tail", "25", name.split()[0]],
                                          capture_output=True, text=True, timeout=60)
                    lines.append(f"--- {name.split()[0]}\n{(logs.stdout + logs.stderr)[-2500:]}")
            return "\n".join(lines)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"(could not describe the containers: {exc})"

    def purge(self) -> list[str]:
        """Removes the project's containers, volumes and networks, by label and by name; what it failed
        to remove (empty when clean)."""
        try:
            self.run_compose("down", "-v", "-t", "5", timeout_s=300)
        except (AssertionError, subprocess.SubprocessError):
            pass  # whatever `down` left, the engine's own commands remove below
        left = []
        for kind, listing in (("container", ["ps", "-a", "-q", "--filter", self.label]),
                              ("volume", ["volume", "ls", "-q"]), ("network", ["network", "ls", "-q"])):
            names = self.engine_run(*listing, check=False).split()
            if kind != "container":
                names = [n for n in names if n.startswith((f"{self.project}_", f"{self.project}-"))]
            for name in names:
                remove = ["rm", "-f", "-v"] if kind == "container" else [kind, "rm", "-f"]
                if subprocess.run([self.engine, *remove, name], capture_output=True, timeout=120).returncode:
                    left.append(f"{kind} {name}")
        return left
