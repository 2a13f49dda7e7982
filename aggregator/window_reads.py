"""The aggregator's reads of a subject's windows "from a start on" (redis_layout.series_key hashes).

A hash is read by its fields, the window starts of a range; "from a start on" ends at the key's newest
window (redis_layout.NEWEST_FIELD). So a read is two pipelines of plain commands: each key's newest start
(HGET), then the grid from the start up to it (HMGET). A script call a key (READ_WINDOWS_LUA, one round
trip) cost Redis ~10x as much: it only reads a grid longer than MAX_GRID_READ (a read reaching far back),
which it bounds by what the hash holds. The commands are laid out and packed on Arrow (resp_commands): a
restart reads ~100,000 keys at once, and redis-py's packing and pipeline cost ~10 us a command, more than
Redis did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.resp_commands import back_to_back, bulk, execute
from contract import redis_layout as layout

# Window starts read with one HMGET at most; a longer span goes through READ_WINDOWS_LUA.
MAX_GRID_READ = 2_000
_FAR = 2**62  # a newest start further than this from zero is far: read by the script, bounded by the hash


def read_windows(client: redis.Redis, window: str, reads: Sequence[tuple[str, int]], reach: int = 0
                 ) -> tuple[list[list[Any]], list[int | None]]:
    """For each (key, oldest start wanted): the members of its windows from that start on (in no
    particular order), and the key's newest window start (None: it holds no window). `reach`: see
    read_members."""
    members, counts, newest = read_members(client, window, reads, reach)
    ends = np.cumsum(counts).tolist()
    return [members[end - count:end] for end, count in zip(ends, counts.tolist(), strict=True)], newest


def read_members(client: redis.Redis, window: str, reads: Sequence[tuple[str, int]], reach: int = 0
                 ) -> tuple[list[Any], np.ndarray, list[int | None]]:
    """read_windows' members one after the other, read after read, with how many each read has. With a
    `reach`, a read's first command asks for the key's newest start and its first `reach` windows at once
    (one command a key where the caller knows how far its reads mostly go; a window past the newest is left
    out, as the two steps leave it), and only the longer reads go on."""
    if not reads:
        return [], np.zeros(0, np.int64), []
    keys = pa.array([key for key, _ in reads], pa.string())
    size = layout.WINDOWS[window].size_ms
    low = np.fromiter((low for _, low in reads), np.int64, len(reads))
    first = low + (-low) % size
    if reach:
        ahead = execute(client, _grid_reads(keys, first, np.full(len(reads), reach), size, with_newest=True),
                        len(reads))
        newest = [_start(answer[0]) for answer in ahead]
    else:
        newest = [_start(raw) for raw in execute(client, _hgets(keys, layout.NEWEST_FIELD), len(reads))]
    last = np.array([-_FAR if n is None else min(max(n, -_FAR), _FAR) for n in newest], np.int64)
    fields = np.where(last >= first, (last - first) // size + 1, 0)
    done = np.minimum(fields, reach)
    answers: list[Any] = [[]] * len(reads) if not reach else \
        [answer[1:1 + n] for answer, n in zip(ahead, done.tolist(), strict=True)]
    grid = np.flatnonzero((fields > done) & (fields <= MAX_GRID_READ))
    if len(grid):
        grids = execute(client, _grid_reads(keys.take(grid), first[grid] + done[grid] * size,
                                            fields[grid] - done[grid], size), len(grid))
        for at, answer in zip(grid.tolist(), grids, strict=True):
            answers[at] = answers[at] + answer
    scripted = np.flatnonzero(fields > MAX_GRID_READ)
    if len(scripted):
        script = client.register_script(layout.READ_WINDOWS_LUA)
        pipe = client.pipeline(transaction=False)
        for at in scripted.tolist():
            script(keys=[reads[at][0]], args=[reads[at][1], size], client=pipe)
        for at, answer in zip(scripted.tolist(), pipe.execute(), strict=True):
            answers[at] = answer
    members = [m for answer in answers for m in answer if m is not None]
    counts = np.fromiter((len(a) - a.count(None) for a in answers), np.int64, len(answers))
    return members, counts, newest


def _grid_reads(keys: pa.Array, first: np.ndarray, fields: np.ndarray, size: int, with_newest: bool = False
                ) -> pa.Buffer:
    """HMGET of each key's `fields[k]` window starts from `first[k]` on (after its NEWEST_FIELD when
    `with_newest`), in RESP. Keys read over the same grid (most of a restart's) share its fields' RESP,
    laid out once."""
    grids, which = np.unique(np.stack([first, fields]), axis=1, return_inverse=True)
    counts = grids[1]
    starts = np.repeat(grids[0] - np.concatenate([[0], np.cumsum(counts)[:-1]]) * size, counts) \
        + np.arange(int(counts.sum())) * size
    runs = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32()),
                                    bulk(pc.cast(pa.array(starts), pa.string())))
    grid_fields = pc.binary_join(runs, "").take(which.reshape(-1))
    if with_newest:
        grid_fields = pc.binary_join_element_wise(bulk(pa.array([layout.NEWEST_FIELD]))[0], grid_fields, "")
    arguments = pc.cast(pa.array(fields + 2 + with_newest), pa.string())
    heads = pc.binary_join_element_wise("*", arguments, "\r\n$5\r\nHMGET\r\n", bulk(keys), "")
    return back_to_back(pc.binary_join_element_wise(heads, grid_fields, ""))


def _hgets(keys: pa.Array, field: str) -> pa.Buffer:
    """HGET of `field` of each key, in RESP."""
    return back_to_back(pc.binary_join_element_wise("*3\r\n$4\r\nHGET\r\n", bulk(keys),
                                                    bulk(pa.array([field]))[0], ""))


def _start(raw: bytes | None) -> int | None:
    """A key's newest window start (NEWEST_FIELD), None without one (or one that is not a number)."""
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None
