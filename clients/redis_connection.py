"""The one way the parts open Redis: with connect and socket timeouts, so a hung Redis fails a call.

Without a socket timeout a SIGSTOPped or blackholed Redis blocks a reply read for good: the aggregator's
sink would hang forever instead of failing and being restarted. Timeouts given in the
URL's query string (`?socket_timeout=…&socket_connect_timeout=…`, redis-py's names, seconds) win over
the settings `redis.connect.timeout.ms` and `redis.socket.timeout.ms`.
"""

from __future__ import annotations

from typing import Final

import redis

from contract.config import SrmConfig

DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
# Longer than the slowest call the parts make on purpose (a merge's MULTI, cut in MERGE_PARTS pieces).
DEFAULT_SOCKET_TIMEOUT_S: Final = 10.0
HEALTH_CHECK_S: Final = 30


def connect(url: str, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
            socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S) -> redis.Redis:
    if connect_timeout_s <= 0 or socket_timeout_s <= 0:
        raise ValueError("Redis timeouts must be positive")
    return redis.Redis.from_url(url, socket_connect_timeout=connect_timeout_s,
                                socket_timeout=socket_timeout_s, health_check_interval=HEALTH_CHECK_S)


def url_with_timeouts(url: str, connect_timeout_s: float, socket_timeout_s: float) -> str:
    """The URL carrying the timeouts, for parts that get only a URL (the aggregator's sinks); timeouts the
    URL names already are kept."""
    base, _, query = url.partition("?")
    params = [p for p in query.split("&") if p]
    names = {p.split("=", 1)[0] for p in params}
    for name, value in (("socket_connect_timeout", connect_timeout_s), ("socket_timeout", socket_timeout_s)):
        if name not in names:
            params.append(f"{name}={value:g}")
    return f"{base}?{'&'.join(params)}"


def configured_url(config: SrmConfig) -> str:
    """`redis.url` carrying the configured timeouts (a process hands only the URL to its children)."""
    connect_ms = config.setting("redis.connect.timeout.ms")
    socket_ms = config.setting("redis.socket.timeout.ms")
    for key, value in (("redis.connect.timeout.ms", connect_ms), ("redis.socket.timeout.ms", socket_ms)):
        if value is None or value <= 0:
            raise config.config_error(key, f"must be a positive number of milliseconds, got {value}")
    return url_with_timeouts(config.setting("redis.url") or "", connect_ms / 1000, socket_ms / 1000)
