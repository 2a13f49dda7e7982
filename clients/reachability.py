"""Start-up probes of what a process talks to: one line naming what does not answer and how to fix it.

Run once when a console script starts, so an operator reads "cluster 'east' (127.0.0.1:9092) does not
accept connections" before any retry loop or client library speaks. The probes are plain: a TCP
connect to the bootstrap servers (so they hold for every security protocol) and a Redis PING.
"""

from __future__ import annotations

import logging
import socket

from clients.client_faults import redact_url_secrets
from clients.client_renderings import kafka_client_config
from contract.config import SrmConfig

LOG = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


class Unreachable(Exception):
    """Something the process cannot start without does not answer; once it does, a restart works
    (exit status 1, unlike a configuration error's 2)."""


def redacted_url(url: str) -> str:
    """The URL without its password or the secrets of its query string, fit for a log line."""
    return redact_url_secrets(url)


def redis_problem(url: str) -> str | None:
    """None when Redis at ``url`` answers PING, else one line naming it and the fix."""
    import redis

    from clients.redis_connection import connect

    try:
        client = connect(url, PROBE_TIMEOUT_S, PROBE_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()
    except redis.RedisError as exc:
        return (f"Redis at {redacted_url(url)} does not answer ({exc}): start redis-server there "
                f"or set redis.url")
    return None


def bootstrap_problem(alias: str, bootstrap_servers: str) -> str | None:
    """None when one of the cluster's bootstrap servers accepts a TCP connection, else one line."""
    causes = []
    for server in (s.strip() for s in bootstrap_servers.split(",") if s.strip()):
        host, _, port = server.rpartition(":")
        host = host.split("://")[-1].strip("[]")
        try:
            with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
                return None
        except (OSError, ValueError) as exc:
            causes.append(f"{server}: {getattr(exc, 'strerror', None) or exc}")
    return (f"cluster {alias!r} does not accept connections ({'; '.join(causes) or 'no servers'}): "
            f"start its brokers or fix {alias}.bootstrap.servers")


def warn_unreachable_clusters(config: SrmConfig, aliases: list[str], consequence: str) -> list[str]:
    """Logs one warning per cluster that does not accept connections; returns those aliases."""
    unreachable = []
    for alias in dict.fromkeys(aliases):
        servers = kafka_client_config(config, alias, role="admin")["bootstrap.servers"]
        problem = bootstrap_problem(alias, servers)
        if problem:
            LOG.warning("%s; %s", problem, consequence)
            unreachable.append(alias)
    return unreachable
