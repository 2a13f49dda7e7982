"""History-based offset translation over the offset-syncs topic (MM2 compatible).

Written by the offset-syncs reader (one `add` per record of partition 0 of
`mm2-offset-syncs.<alias>.internal`, in log order); read by the checkpoint task
through `translate_downstream`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from driver.offset_sync_history import RecentSyncs

LOG = logging.getLogger(__name__)

# One slot per bit of a 64-bit offset, as MM2 does (SYNCS_PER_PARTITION = Long.SIZE).
SYNCS_PER_PARTITION: Final = 64
MAX_OFFSET: Final = 2**63 - 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class SyncPoint:
    """One offset sync: the record at `upstream_offset` landed at `downstream_offset`."""

    upstream_offset: int
    downstream_offset: int


class OffsetSyncStore:
    """Keeps 64 exponentially spaced offset syncs per partition and translates offsets.

    Slots of one partition, newest first (distinct syncs only; a sync may fill
    several neighbouring slots)::

        slot       0     1     2     3   ...    k        ...   63
        upstream  1000  999   996   990  ...  ~1000-2^k  ...  oldest usable
                  |<- dense near the head ->|<---- exponentially sparse ---->|

    Invariants, checked between neighbours on every `add` and holding for all
    pairs i < j whose syncs are distinct objects (MM2 compatible):

    - A: ``slots[0]`` is the latest sync read.
    - B: ``slots[i].up <= slots[j].up + 2^j - 2^i``: no slot is too old for its
      position, so a lagging group finds a sync at most ~2^k behind it.
    - C: ``slots[i].up >= slots[j].up + 2^max(i-2, 0)``: distinct syncs stay
      apart, so 64 slots span the whole offset range.
    - D: ``slots[63]`` is the earliest sync usable for translation.

    A sync whose upstream offset is below ``slots[0]`` (the upstream topic was
    recreated or truncated) fills all 64 slots, because older syncs no longer
    describe the topic. While the initial read of the syncs topic is running and
    `initialization_must_read_to_end` is set, every sync also fills all slots:
    without earlier checkpoints to stay monotonic against, only the newest sync is
    trusted (MM2 KAFKA-16622). Translation is refused until `mark_read_to_end`.

    The per-partition history is an immutable tuple replaced on each `add`, so
    readers on other threads always see a consistent history.

    Beyond MM2: with `recent_capacity` > 0 the store also keeps the recent syncs of
    each partition densely (`RecentSyncs`, thinned to `spacing` = offset.lag.max + 1)
    and translates through whichever of the two holds the later sync at or before
    the group's offset. Both are real syncs at or before it, so the answer is never
    above the exact offset; within the recent span it re-reads at most
    offset.lag.max records. The recent history is read and written on one thread.
    """

    def __init__(self, initialization_must_read_to_end: bool = True, recent_capacity: int = 0,
                 spacing: int = 101) -> None:
        if recent_capacity < 0:
            raise ValueError(f"recent_capacity must be >= 0, got {recent_capacity}")
        self._initialization_must_read_to_end = initialization_must_read_to_end
        self._read_to_end = False
        self._histories: dict[TopicPartition, tuple[SyncPoint, ...]] = {}
        self._recent_capacity, self._spacing = recent_capacity, spacing
        self._recent: dict[TopicPartition, RecentSyncs] = {}

    @property
    def ready(self) -> bool:
        """True once the initial read of the syncs topic reached its end."""
        return self._read_to_end

    def mark_read_to_end(self) -> None:
        """Record that the initial read of the syncs topic is complete."""
        self._read_to_end = True
        LOG.debug("offset syncs read to end: %d partitions", len(self._histories))

    def add(self, topic: str, partition: int, upstream_offset: int, downstream_offset: int) -> None:
        """Apply one offset sync read from the syncs topic."""
        sync = SyncPoint(_checked_offset(upstream_offset), _checked_offset(downstream_offset))
        key = (topic, partition)
        history = self._histories.get(key)
        restart = history is None or self._must_restart_history(history, sync)
        if history is None or restart:
            self._histories[key] = (sync,) * SYNCS_PER_PARTITION
        else:
            self._histories[key] = advance_history(history, sync)
        if self._recent_capacity:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = RecentSyncs(self._recent_capacity, self._spacing)
            if restart:
                recent.reset(sync.upstream_offset, sync.downstream_offset)
            else:
                recent.add(sync.upstream_offset, sync.downstream_offset)

    def syncs(self, topic: str, partition: int) -> tuple[SyncPoint, ...]:
        """The 64 slots of a partition, newest first; empty when none was read."""
        return self._histories.get((topic, partition), ())

    def recent(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """The dense recent syncs of a partition, oldest first; empty when disabled or none read."""
        recent = self._recent.get((topic, partition))
        return recent.syncs() if recent is not None else []

    def translate_downstream(
        self, group: str, topic: str, partition: int, upstream_offset: int
    ) -> int | None:
        """Downstream offset for a group's upstream offset, or None if untranslatable."""
        if not self._read_to_end:
            # Half-read history could yield offsets older than ones already emitted.
            LOG.debug("translate %s %s-%d: initial read in progress", group, topic, partition)
            return None
        history = self._histories.get((topic, partition))
        if history is None:
            LOG.debug("translate %s %s-%d: no offset sync", group, topic, partition)
            return None
        sync = latest_sync_at_or_before(history, upstream_offset)
        recent = self._recent.get((topic, partition))
        closer = recent.at_or_before(upstream_offset) if recent is not None else None
        if closer is not None and (sync.upstream_offset > upstream_offset
                                   or closer[0] > sync.upstream_offset):
            sync = SyncPoint(*closer)
        if sync.upstream_offset > upstream_offset:
            LOG.debug(
                "translate %s %s-%d@%d: behind oldest %s", group, topic, partition, upstream_offset, sync
            )
            return None
        return translate_from(sync, upstream_offset)

    def _must_restart_history(self, history: tuple[SyncPoint, ...], sync: SyncPoint) -> bool:
        initial_read = not self._read_to_end and self._initialization_must_read_to_end
        return initial_read or sync.upstream_offset < history[0].upstream_offset


def translate_from(sync: SyncPoint, upstream_offset: int) -> int:
    """Translate through one sync at or before `upstream_offset` (MM2 +1 rule).

    Past the sync we only know that later records land after `sync.downstream`;
    how many upstream offsets were dropped on the way is unknown, so answering
    more than +1 could skip records. Answering +1 may cause re-reads instead.
    """
    step = 0 if upstream_offset == sync.upstream_offset else 1
    return sync.downstream_offset + step


def latest_sync_at_or_before(history: tuple[SyncPoint, ...], upstream_offset: int) -> SyncPoint:
    """Newest slot with upstream <= `upstream_offset`, else the oldest slot."""
    for sync in history:
        if sync.upstream_offset <= upstream_offset:
            return sync
    return history[-1]


def advance_history(original: tuple[SyncPoint, ...], sync: SyncPoint) -> tuple[SyncPoint, ...]:
    """History after appending a sync no older than its head (MM2 compatible).

    Slot 0 always takes the new sync (A). Walking towards older slots, the first
    slot that still satisfies B against its newer neighbour ends the walk: B then
    holds for every later slot too. A slot violating B takes the newest old sync
    that satisfies B and C at that position, so history is kept where possible.
    """
    slots = list(original)
    slots[0] = sync
    cursor = _ReplacementCursor(original, sync)
    for current in range(1, SYNCS_PER_PARTITION):
        replacement = cursor.advance(slots, current)
        previous = current - 1
        if invariant_b(slots[previous], slots[current], previous, current):
            break
        slots[current] = replacement
    return tuple(slots)


@dataclass(slots=True)
class _ReplacementCursor:
    """Walks the old history newest first, offering old syncs for re-use in older slots."""

    original: tuple[SyncPoint, ...]
    replacement: SyncPoint
    index: int = 0

    def advance(self, slots: list[SyncPoint], current: int) -> SyncPoint:
        """A sync that satisfies B and C at `current` given the slots before it."""
        previous = current - 1
        while True:
            candidate = self.original[self.index]
            recent = invariant_b(slots[previous], candidate, previous, current)
            apart_from_previous = invariant_c(slots[previous], candidate, previous)
            apart_from_next = current + 1 >= SYNCS_PER_PARTITION or invariant_c(
                candidate, slots[current + 1], current
            )
            following = self.index + 1
            repeated = following < SYNCS_PER_PARTITION and candidate is self.original[following]
            promote = recent and apart_from_previous and apart_from_next
            # A candidate too close to the previous slot can never be used later.
            skip = repeated or not apart_from_previous
            if promote:
                self.replacement = candidate
            if promote or skip:
                self.index += 1
            # Only promote from lower to higher slots: never look past `current`.
            if not (skip and self.index < current):
                return self.replacement


def invariant_b(newer: SyncPoint, older: SyncPoint, i: int, j: int) -> bool:
    """Invariant B between slot i (newer) and slot j (older), i < j.

    Java wraps on overflow and treats a negative bound as satisfied; with Python
    integers and offsets in [0, 2^63) the plain comparison gives the same answer.
    """
    bound = older.upstream_offset + (1 << j) - (1 << i)
    return newer is older or newer.upstream_offset <= bound


def invariant_c(newer: SyncPoint, older: SyncPoint, i: int) -> bool:
    """Invariant C between slot i (newer) and any older slot."""
    bound = older.upstream_offset + (1 << max(i - 2, 0))
    return newer is older or newer.upstream_offset >= bound


def _checked_offset(offset: int) -> int:
    # The invariants' arithmetic mirrors Java longs; reject what a long cannot hold.
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset {offset} outside [0, 2^63)")
    return offset
