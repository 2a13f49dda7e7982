"""Lag in seconds, interpolated from a history of end offsets (kafka-lag-exporter's method).

An ``OffsetTimeTable`` records, for one partition, when the partition's end offset was seen at
which value. ``lag_seconds`` asks the table when the end offset passed a consumer's position
(the next upstream offset a replication will copy, or a checkpointed group's offset) and returns
how long ago that was. The table is an immutable value: ``append`` returns a new table, so it
can be rebuilt from Redis, pickled into Spark and compared in tests without hidden state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "DEFAULT_TABLE_CAPACITY",
    "OffsetPoint",
    "OffsetTimeTable",
    "lag_seconds",
]

# kafka-lag-exporter keeps 60 points; at our default 30 s metrics period that is 30 minutes of
# history, enough to interpolate a lag of half an hour and extrapolate (less precisely) beyond.
DEFAULT_TABLE_CAPACITY: Final = 60

# Two points are the least a straight line (and a flat run's start and end) can be drawn through.
_POINTS_PER_LINE: Final = 2

_MS_PER_SECOND: Final = 1000.0


class OffsetPoint(NamedTuple):
    """The partition's end offset as observed at ``timestamp_ms``. A named tuple, not a dataclass: the
    sink makes ~10^5 of them a batch (60 per partition's table); with a frozen dataclass and the rules in
    a function of their own, a 72-window table took 92 us to build, now ~40 us with from_points' own
    construction."""

    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OffsetTimeTable:
    """Bounded, time-ordered and offset-monotonic history of one partition's end offset."""

    capacity: int = DEFAULT_TABLE_CAPACITY
    points: tuple[OffsetPoint, ...] = ()

    def __post_init__(self) -> None:
        if self.capacity < _POINTS_PER_LINE:
            raise ValueError(f"capacity must be at least {_POINTS_PER_LINE}, got {self.capacity}")
        if len(self.points) > self.capacity:
            raise ValueError(f"{len(self.points)} points exceed capacity {self.capacity}")
        for older, newer in zip(self.points, self.points[1:], strict=False):
            if not _is_acceptable(older, newer.offset, newer.timestamp_ms):
                raise ValueError(f"points out of order: {older} then {newer}")

    @classmethod
    def from_points(
        cls, points: Iterable[OffsetPoint], capacity: int = DEFAULT_TABLE_CAPACITY,
        after: tuple[OffsetPoint, ...] = (),
    ) -> OffsetTimeTable:
        """Build a table by appending ``points`` in order, under the rules of ``append``; ``after``: the
        points of a table built so, with the same capacity, to append them to (what it was built from,
        followed by ``points``, builds the same table).

        One list, checked once at the end: appending to an immutable table copies and checks every
        point again, quadratic in the 60 points a partition's history holds, for every partition of
        every batch the aggregator writes."""
        kept: list[OffsetPoint] = list(after)
        # The rules' state is the newest kept point, so a built table's points are all it takes to go on.
        last_offset, last_ts = after[-1] if after else (0, 0)
        # _is_acceptable's rule inline, on locals: a call and two attribute reads per point were half
        # the cost of a table.
        for point in points:
            offset, timestamp_ms = point
            if kept:
                if timestamp_ms <= last_ts or offset < last_offset:
                    continue
                if offset == last_offset and len(kept) >= _POINTS_PER_LINE and kept[-2][0] == offset:
                    # An idle partition would otherwise fill the table with identical offsets and push
                    # out the history that gives the slope; keeping the run's first and last points
                    # preserves both when the partition went idle and that it still is.
                    kept[-1] = point
                    last_ts = timestamp_ms
                    continue
                if len(kept) == capacity:
                    del kept[0]
            kept.append(point)
            last_offset, last_ts = offset, timestamp_ms
        if capacity < _POINTS_PER_LINE:
            raise ValueError(f"capacity must be at least {_POINTS_PER_LINE}, got {capacity}")
        # In order and within capacity by construction: __post_init__'s check of every pair again cost
        # as much as a third of building the table.
        table = object.__new__(cls)
        object.__setattr__(table, "capacity", capacity)
        object.__setattr__(table, "points", tuple(kept))
        return table

    @property
    def newest(self) -> OffsetPoint | None:
        return self.points[-1] if self.points else None

    def __len__(self) -> int:
        return len(self.points)

    def append(self, offset: int, timestamp_ms: int) -> OffsetTimeTable:
        """Return the table with the observation added, or ``self`` when it must be ignored."""
        if self.points and not _is_acceptable(self.points[-1], offset, timestamp_ms):
            return self
        return OffsetTimeTable.from_points((*self.points, OffsetPoint(offset, timestamp_ms)), self.capacity)


def _is_acceptable(newest: OffsetPoint, offset: int, timestamp_ms: int) -> bool:
    # A point not newer than the last one is a late or duplicate read; an end offset lower than
    # the last one is a read from a lagging replica. Either would break the monotonic line that
    # interpolation relies on, so the exporter drops them, and so do we.
    return timestamp_ms > newest.timestamp_ms and offset >= newest.offset


def lag_seconds(table: OffsetTimeTable, committed_or_replicated_offset: int, now_ms: int) -> float | None:
    """Seconds between ``now_ms`` and when the end offset reached the given position.

    ``None`` when the table holds fewer than two points (the exporter's NaN: unknown, not zero),
    unless the position has already reached the newest end offset, which is 0 with any table.
    A position beyond the newest end offset (offsets read non-atomically) is also 0, and a
    prediction later than ``now_ms`` is clamped to 0 rather than reported as negative lag.
    """
    newest = table.newest
    if newest is None:
        return None
    if committed_or_replicated_offset >= newest.offset:
        return 0.0
    if len(table) < _POINTS_PER_LINE:
        return None
    predicted_ms = _predict_timestamp_ms(table.points, committed_or_replicated_offset)
    return max(0.0, (now_ms - predicted_ms) / _MS_PER_SECOND)


def _predict_timestamp_ms(points: tuple[OffsetPoint, ...], offset: int) -> float:
    """When the end offset reached ``offset``: interpolated inside the table, else extrapolated."""
    bracket = _bracket(points, offset)
    if bracket is None:
        # Below the table's oldest point: extend the trend of the whole table backwards, as the
        # exporter does, because the local slope at its old end says little about the past.
        return _on_line(points[0], points[-1], offset)
    return _on_line(*bracket, offset)


def _bracket(points: tuple[OffsetPoint, ...], offset: int) -> tuple[OffsetPoint, OffsetPoint] | None:
    # Searching from the newest pair picks, for an offset held over a flat run, the latest time the
    # end offset stood there, which is when the records after it started to arrive.
    for left, right in zip(reversed(points[:-1]), reversed(points[1:]), strict=True):
        if left.offset <= offset <= right.offset:
            return left, right
    return None


def _on_line(left: OffsetPoint, right: OffsetPoint, offset: int) -> float:
    offset_span = right.offset - left.offset
    if offset_span == 0:
        # The whole table is one flat run and the position lies below it: the slope is unknown, but
        # the end offset was already past the position at the oldest point, so that time is a
        # lower bound on the lag (the exporter divides by zero here and reports infinity).
        return float(left.timestamp_ms)
    time_span = right.timestamp_ms - left.timestamp_ms
    return right.timestamp_ms - (right.offset - offset) * time_span / offset_span
