"""Lag in seconds' view of the past: a partition's recent 10 s end-offset windows, kept across batches.

Not the merge's copy of the windows (``stored_windows`` keeps every window size on Arrow for merging):
this one is a small per-series dict that latest values read, by the query thread.

Lag in seconds needs ~60 windows of a partition's end-offset history per report: reading them from
Redis for every partition of every batch would cost more than the batch itself. One query is the only
writer of its target's series, so the sink can keep what it wrote: a series is read from Redis the
first time it is needed (or when an older range is asked for), and after that follows the batches
written. A batch's partials are merged in before the batch's views read them (once a series, not once
a view), and a batch whose write fails clears it, so once a batch commits it equals what Redis holds over
its range; a restarted process starts empty and reads Redis again.

A series is kept over the span it was first read for and as much again, at most KEEP_SLACK_MS more (and
at most `keep_ms` in all): a verdict reads ~20 periods of offsets, lag in seconds 10 minutes of end
offsets, and at 2,000 partitions keeping every series for the longest span held ~10^6 windows in the
driver. The room past the span lets a report older than the series' newest window (by up to the slack) be
read from what is kept; an older one reads Redis again.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import redis

from aggregator.window_reads import read_windows
from contract.redis_layout import (
    FINEST_WINDOW,
    SeriesId,
    WindowAggregate,
    decode_member,
    merge_windows,
    series_key,
)

LOG = logging.getLogger(__name__)

# Kept past a series' read span: twice the default watermark delay, and a window.
KEEP_SLACK_MS = 120_000


def series_id(target: str, source: str, topic: str, partition: int, metric: str,
              group: str | None = None) -> SeriesId:
    """One SeriesId object per series in this process. The sink looks the series a batch names up in
    several dicts (the batch's history, the kept history), ~16 lookups a partition a batch: with the same
    object each finds its key by identity, not by the dataclass's __eq__ (~10 ms a live batch)."""
    # Always six arguments to the cache: it keys on the call's arguments as given, and a call without
    # `group` made a second object for the series of a call with group None.
    return _series_id(target, source, topic, partition, metric, group)


@lru_cache(maxsize=1 << 17)
def _series_id(target: str, source: str, topic: str, partition: int, metric: str,
               group: str | None) -> SeriesId:
    return SeriesId(target, source, topic, partition, metric, group)


@lru_cache(maxsize=1 << 17)  # named for every partition of every batch: a few thousand series
def finest_key(series: SeriesId) -> str:
    """The Redis key of a series' finest windows (shared with the other metrics of its subject)."""
    return series_key(series, FINEST_WINDOW.name)


def decoded_members(key: str, members: Iterable[bytes | str]) -> list[dict[str, WindowAggregate]]:
    """Each member of `key`'s reply as metric -> window; one that does not decode is logged and left out
    (the merge replaces it when a batch touches its window)."""
    out = []
    for member in members:
        try:
            out.append(decode_member(member)[1])
        except ValueError as exc:
            LOG.warning("skipping %s in %s", exc, key)
    return out


def load_stored(history: WindowHistory, client: redis.Redis,
                wanted: Mapping[SeriesId, tuple[int, int]]) -> None:
    """Reads from Redis (`client`) the series `wanted` (series -> lowest start, widest span read) into
    `history`: one read a finest-window key, for every metric of its subject wanted."""
    by_key: dict[str, list[SeriesId]] = {}
    for series in wanted:
        by_key.setdefault(finest_key(series), []).append(series)
    reads = [(key, min(wanted[s][0] for s in metrics)) for key, metrics in by_key.items()]
    found, _ = read_windows(client, FINEST_WINDOW.name, reads)
    for (key, metrics), members in zip(by_key.items(), found, strict=True):
        windows = decoded_members(key, members)
        for series in metrics:
            low, span = wanted[series]
            held = (w[series.metric] for w in windows if series.metric in w)
            history.load(series, low, held, span)


@dataclass
class SeriesHistory:
    low_ms: int  # every stored window starting at or after this is here
    windows: dict[int, WindowAggregate] = field(default_factory=dict)
    keep_ms: int | None = None  # how far behind its newest window this series is kept (None: the default)
    # The starts of `windows`, ascending: a view is a slice found by bisection, not a scan and a sort of
    # the ~70 windows kept, three views a partition every batch.
    starts: list[int] = field(default_factory=list)
    # `windows` in the order of `starts`: a view is a slice of it, not a lookup a window.
    ordered: list[WindowAggregate] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.starts) != len(self.windows):
            self.starts = sorted(self.windows)
        if len(self.ordered) != len(self.starts):
            self.ordered = [self.windows[start] for start in self.starts]


@dataclass
class WindowHistory:
    keep_ms: int  # how far behind a series' newest window its history is kept
    series: dict[SeriesId, SeriesHistory] = field(default_factory=dict)

    def covers(self, key: SeriesId, low_ms: int) -> bool:
        known = self.series.get(key)
        return known is not None and known.low_ms <= low_ms

    def load(self, key: SeriesId, low_ms: int, stored: Iterable[WindowAggregate],
             span_ms: int | None = None) -> None:
        """What Redis holds of a series from `low_ms` on; `span_ms`: the span it is read over (kept over
        that and as much again, at most KEEP_SLACK_MS more and keep_ms in all; a read further back loads
        it again)."""
        keep = None if span_ms is None else min(self.keep_ms, span_ms + min(span_ms, KEEP_SLACK_MS))
        windows = {w.start_ms: w for w in stored if w.start_ms >= low_ms}
        self.series[key] = SeriesHistory(low_ms, windows, keep, sorted(windows))

    def view(self, key: SeriesId, low_ms: int, high_ms: int,
             newest: int | None = None) -> list[WindowAggregate]:
        """Windows in [low, high]; with `newest`, only that many of the latest of them."""
        known = self.series[key]
        starts = known.starts
        low, end = bisect_left(starts, low_ms), bisect_right(starts, high_ms)
        return known.ordered[low if newest is None else max(low, end - newest):end]

    def merge(self, key: SeriesId, partials: Iterable[WindowAggregate]) -> None:
        """Merges a batch's `partials` into the series (no-op for series not kept), before the batch commits:
        its views read them merged once, not merged again by every view. `expire` once the batch commits;
        a batch that fails must `clear`."""
        known = self.series.get(key)
        if known is None:
            return
        windows, starts, ordered = known.windows, known.starts, known.ordered
        for p in partials:
            start = p.start_ms
            if start >= known.low_ms:
                old = windows.get(start)
                if old is not None:
                    windows[start] = ordered[bisect_left(starts, start)] = merge_windows(old, p)
                    continue
                windows[start] = p
                if not starts or start > starts[-1]:
                    starts.append(start)  # a batch's windows mostly come after the kept ones
                    ordered.append(p)
                else:
                    at = bisect_left(starts, start)
                    starts.insert(at, start)
                    ordered.insert(at, p)

    def expire(self, key: SeriesId) -> None:
        """Drops what is older than the series is kept behind its newest window. After the views of the
        batch that merged it: a view may read a report's range from below the new floor."""
        known = self.series.get(key)
        if known is None or not known.starts:
            return
        starts = known.starts
        floor = starts[-1] - (self.keep_ms if known.keep_ms is None else known.keep_ms)
        if floor > known.low_ms:
            known.low_ms = floor
            expired = bisect_left(starts, floor)
            for start in starts[:expired]:
                del known.windows[start]
            del starts[:expired]
            del known.ordered[:expired]

    def longest_keeps(self) -> dict[str, int]:
        """Per metric, the longest any kept series of it is kept behind its newest window."""
        longest: dict[str, int] = {}
        for key, known in self.series.items():
            keep = self.keep_ms if known.keep_ms is None else known.keep_ms
            if keep > longest.get(key.metric, -1):
                longest[key.metric] = keep
        return longest

    def clear(self) -> None:
        self.series.clear()
