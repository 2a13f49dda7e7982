"""The image's HEALTHCHECK: one command for the three parts, which it tells apart by the container's
main process (``srm-driver``, ``srm-aggregator`` or ``srm-service``, PID 1 under compose).

- srm-service: its own ``/health`` answers 200 on ``service.port`` (liveness, no Redis involved).
- srm-driver: every Kafka cluster of its properties file accepts a TCP connection on a bootstrap server.
- srm-aggregator: the same, Redis too, and the Spark driver's JVM (a child of the main process) runs.

Exit 0 healthy, 1 unhealthy with one line saying why (the engine keeps it in the health log).
"""

from __future__ import annotations

import socket
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import javaproperties

PARTS = ("srm-driver", "srm-aggregator", "srm-service")
TIMEOUT_S = 3.0
DEFAULT_SERVICE_PORT = 6670


def main_command(proc: Path = Path("/proc/1/cmdline")) -> list[str]:
    return [arg for arg in proc.read_bytes().decode(errors="replace").split("\0") if arg]


def part_of(command: list[str]) -> str | None:
    names = {Path(arg).name for arg in command[:3]}
    return next((part for part in PARTS if part in names), None)


def config_path(command: list[str]) -> str | None:
    for flag, value in zip(command, command[1:], strict=False):
        if flag == "--config":
            return value
    return next((arg.removeprefix("--config=") for arg in command if arg.startswith("--config=")), None)


def tcp_problem(what: str, host: str, port: int) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_S):
            return None
    except OSError as exc:
        return f"{what} {host}:{port} does not accept a connection ({exc})"


def kafka_problems(properties: dict[str, str]) -> list[str]:
    problems = []
    for key, servers in sorted(properties.items()):
        if not key.endswith(".bootstrap.servers") or key.count(".") != 2:
            continue
        alias = key.split(".", 1)[0]
        tried = [tcp_problem(f"Kafka cluster {alias}", *_host_port(s.strip(), 9092))
                 for s in servers.split(",") if s.strip()]
        first = tried[0] if tried else None
        if first is not None and all(tried):
            problems.append(first)
    return problems


def redis_problem(properties: dict[str, str]) -> str | None:
    url = urlparse(properties.get("redis.url", "redis://localhost:6379/0"))
    return tcp_problem("Redis", url.hostname or "localhost", url.port or 6379)


def spark_jvm_problem(proc: Path = Path("/proc")) -> str | None:
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended while we looked
            continue
        if args and args[0].endswith(b"java") and any(b"org.apache.spark" in a for a in args):
            return None
    return "the Spark driver's JVM is not running"


def service_problem(properties: dict[str, str]) -> str | None:
    port = int(properties.get("service.port", DEFAULT_SERVICE_PORT))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=TIMEOUT_S) as answer:
            return None if answer.status == 200 else f"/health answered {answer.status}"
    except OSError as exc:
        return f"/health on port {port} does not answer ({exc})"


def problems(part: str, properties: dict[str, str]) -> list[str]:
    if part == "srm-service":
        return [p for p in [service_problem(properties)] if p]
    found = kafka_problems(properties)
    if part == "srm-aggregator":
        found += [p for p in (redis_problem(properties), spark_jvm_problem()) if p]
    return found


def main() -> int:
    command = main_command()
    part, path = part_of(command), config_path(command)
    if part is None or path is None:
        print(f"not an srm-monitor part with --config: {' '.join(command)[:200]}")
        return 1
    try:
        with open(path, encoding="utf-8") as handle:
            properties = javaproperties.load(handle)
    except (OSError, ValueError) as exc:
        print(f"{part}: cannot read {path}: {exc}")
        return 1
    found = problems(part, properties)
    print(f"{part}: " + ("; ".join(found) if found else "healthy"))
    return 1 if found else 0


def _host_port(server: str, default_port: int) -> tuple[str, int]:
    host, _, port = server.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else (server, default_port)


if __name__ == "__main__":
    sys.exit(main())
