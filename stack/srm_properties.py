"""Writes the SRM properties file for a set of local clusters (used by the demo, tests and benches)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def render(bootstraps: Mapping[str, str], replications: list[tuple[str, str]], redis_url: str,
           extra: Mapping[str, object] | None = None) -> str:
    """`bootstraps`: alias -> bootstrap servers; `replications`: enabled (source, target) pairs."""
    lines = [f"clusters = {', '.join(bootstraps)}"]
    lines += [f"{alias}.bootstrap.servers = {servers}" for alias, servers in bootstraps.items()]
    lines += [f"{source}->{target}.enabled = true" for source, target in replications]
    targets = sorted({target for _, target in replications})
    lines += [
        f"driver.target.clusters = {', '.join(targets)}",
        f"service.target.clusters = {', '.join(targets)}",
        f"redis.url = {redis_url}",
        # One broker per cluster here: internal topics cannot have MM2's default of 3 replicas.
        "replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
    ]
    lines += [f"{key} = {value}" for key, value in (extra or {}).items()]
    return "\n".join(lines) + "\n"


def write(path: Path, bootstraps: Mapping[str, str], replications: list[tuple[str, str]], redis_url: str,
          extra: Mapping[str, object] | None = None) -> Path:
    path.write_text(render(bootstraps, replications, redis_url, extra))
    return path
