"""The aggregator's reads of a subject's windows "from a start on" (redis_layout.series_key hashes).

A hash is read by its fields, the window starts of a range; "from a start on" ends at the key's newest
window (redis_layout.NEWEST_FIELD). So a read is two pipelines of plain commands: each key's newest start
(HGET), then the grid from the start up to it (HMGET). A script call a key (READ_WINDOWS_LUA, one round
trip) cost Redis ~10x as much: it only reads a grid longer than MAX_GRID_READ (a read reaching far back),
which it bounds by what the hash holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis

from contract import redis_layout as layout

# Window starts read with one HMGET at most; a longer span goes through READ_WINDOWS_LUA.
MAX_GRID_READ = 2_000


def read_windows(client: redis.Redis, window: str, reads: Sequence[tuple[str, int]]
                 ) -> tuple[list[list[Any]], list[int | None]]:
    """For each (key, oldest start wanted): the members of its windows from that start on (in no
    particular order), and the key's newest window start (None: it holds no window)."""
    heads = client.pipeline(transaction=False)
    for key, _ in reads:
        heads.hget(key, layout.NEWEST_FIELD)
    newest = [_start(raw) for raw in heads.execute()]
    script = client.register_script(layout.READ_WINDOWS_LUA)
    pipe = client.pipeline(transaction=False)
    ways = []
    for (key, low), last in zip(reads, newest, strict=True):
        fields = [] if last is None else layout.window_fields(window, low, last)
        ways.append("grid" if 0 < len(fields) <= MAX_GRID_READ else "script" if fields else "none")
        if ways[-1] == "grid":
            pipe.hmget(key, fields)
        elif ways[-1] == "script":
            script(keys=[key], args=[low, layout.WINDOWS[window].size_ms], client=pipe)
    replies = iter(pipe.execute() if any(way != "none" for way in ways) else [])
    members = [[] if way == "none" else layout.held(next(replies)) if way == "grid"
               else cast(list[Any], next(replies)) for way in ways]
    return members, newest


def _start(raw: bytes | None) -> int | None:
    """A key's newest window start (NEWEST_FIELD), None without one (or one that is not a number)."""
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None
