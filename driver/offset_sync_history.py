"""The recent offset syncs of one partition, dense enough for a tight translation.

MM2's 64 exponentially spaced slots (`driver.offset_sync_store`) keep a sync about every 2^k offsets
k slots back, so a group a few hundred records behind the head translates to a sync hundreds of
records before it: nothing skipped, but a failed-over application re-reads that much. Next to the
slots, the store keeps this history: every sync read, thinned only where a sync adds nothing to the
bound, in two arrays of 64-bit offsets.

Bound: with every due sync emitted (`driver.offset_sync_writer`), the records between two emitted syncs
land less than `offset.lag.max` + 1 offsets after the first, so translating through the newest emitted
sync at or before a group's offset re-reads at most `offset.lag.max` records. A sync is dropped here only
when the one after it lands at most `spacing` = `offset.lag.max` + 1 offsets after the one before it:
translating through that earlier sync then re-reads at most `offset.lag.max` records too. Translation is
never above the exact offset (MM2's +1 rule), so nothing is skipped.

Memory: two `array('q')` of at most `capacity` + `capacity` // 4 entries, 16 bytes per entry.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right


class RecentSyncs:
    """Ascending syncs of one partition, the newest `capacity` (or a quarter more, until compacted)."""

    __slots__ = ("_capacity", "_spacing", "_ups", "_downs")

    def __init__(self, capacity: int, spacing: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if spacing < 1:
            raise ValueError(f"spacing must be >= 1 (offset.lag.max + 1), got {spacing}")
        self._capacity, self._spacing = capacity, spacing
        self._ups, self._downs = array("q"), array("q")

    def __len__(self) -> int:
        return len(self._ups)

    def syncs(self) -> list[tuple[int, int]]:
        """(upstream, downstream) pairs, oldest first."""
        return list(zip(self._ups, self._downs, strict=True))

    def reset(self, upstream: int, downstream: int) -> None:
        """Forget everything before this sync (the topic was rewound or the target truncated)."""
        self._ups, self._downs = array("q", [upstream]), array("q", [downstream])

    def add(self, upstream: int, downstream: int) -> None:
        """One sync in log order."""
        ups, downs = self._ups, self._downs
        if not ups:
            ups.append(upstream)
            downs.append(downstream)
            return
        if upstream < ups[-1] or downstream < downs[-1]:
            # Older syncs describe a topic or a target that no longer exists.
            self.reset(upstream, downstream)
            return
        if upstream == ups[-1] or (len(ups) >= 2 and downstream - downs[-2] <= self._spacing):
            # A re-sent sync of the same record, or the previous one is redundant for the bound:
            # translating through the one before it re-reads at most offset.lag.max records.
            ups[-1], downs[-1] = upstream, downstream
            return
        ups.append(upstream)
        downs.append(downstream)
        if len(ups) >= self._capacity + self._capacity // 4:
            drop = len(ups) - self._capacity  # amortized: one slice per quarter capacity of syncs
            del ups[:drop]
            del downs[:drop]

    def at_or_before(self, upstream: int) -> tuple[int, int] | None:
        """The newest sync whose upstream offset is at most `upstream`, None if all are later."""
        index = bisect_right(self._ups, upstream) - 1
        if index < 0:
            return None
        return self._ups[index], self._downs[index]
