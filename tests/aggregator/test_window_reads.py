"""The aggregator's reads of a subject's windows from a start on (window_reads), on a real Redis: the
grid up to the key's newest window, a script for a span longer than a read's grid, nothing for a key
without windows; each the same members."""

from __future__ import annotations

import uuid

import pytest
import redis

from aggregator import window_reads
from aggregator.window_reads import read_windows
from contract import redis_layout as layout

pytestmark = pytest.mark.integration

T0 = 1_700_002_800_000


def member(start: int, value: float) -> str:
    return layout.encode_member(start, {"record_count": layout.WindowAggregate(start, 1, value, value, value,
                                                                                 value, start)})


@pytest.mark.parametrize("reach", [0, 1, 2, 72])
@pytest.mark.parametrize("grid_limit", [window_reads.MAX_GRID_READ, 3])
def test_windows_from_a_start_on_whatever_way_they_are_read(redis_url: str, monkeypatch, grid_limit: int,
                                                            reach: int):
    monkeypatch.setattr(window_reads, "MAX_GRID_READ", grid_limit)  # 3: every longer read is the script's
    client = redis.Redis.from_url(redis_url)
    name = uuid.uuid4().hex[:8]
    held = f"srm:wh:{{w|{name}|t}}:0::10s"
    starts = [T0, T0 + 30_000, T0 + 40_000, T0 + 90_000]
    client.hset(held, mapping={**{str(s): member(s, i) for i, s in enumerate(starts)},
                               layout.NEWEST_FIELD: starts[-1]})
    empty = f"srm:wh:{{w|{name}|t}}:1::10s"
    # Windows past a key's newest start, or in a key without one, are not its windows (left by a writer
    # that died between its two writes): no way of reading returns them.
    stale = f"srm:wh:{{w|{name}|t}}:2::10s"
    client.hset(stale, mapping={str(T0): member(T0, 1), str(T0 + 10_000): member(T0 + 10_000, 2),
                                layout.NEWEST_FIELD: T0})
    unnamed = f"srm:wh:{{w|{name}|t}}:3::10s"
    client.hset(unnamed, mapping={str(T0): member(T0, 1)})
    members, newest = read_windows(client, "10s", [(held, T0 + 25_000), (empty, T0), (held, T0 + 100_000),
                                                   (stale, T0), (unnamed, T0), (held, T0 - 3)], reach)
    assert [sorted(m) for m in members] == [
        sorted(member(s, i).encode() for i, s in enumerate(starts) if s >= T0 + 25_000), [], [],
        [member(T0, 1).encode()], [], sorted(member(s, i).encode() for i, s in enumerate(starts))]
    assert newest == [starts[-1], None, starts[-1], T0, None, starts[-1]]
    client.delete(held, stale, unnamed)
    client.close()
