"""The dense recent syncs beside MM2's 64 slots: the bound they give and what they never do (no broker)."""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Callable
from typing import cast

import pytest
from confluent_kafka import Producer

from contract.records.mm2 import OffsetSync
from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.offset_sync_history import RecentSyncs
from driver.offset_sync_store import OffsetSyncStore


class TestRecentSyncs:
    def test_keeps_syncs_far_enough_apart(self) -> None:
        recent = RecentSyncs(capacity=8, spacing=101)
        for up in (0, 101, 202, 303):
            recent.add(up, up)
        assert recent.syncs() == [(0, 0), (101, 101), (202, 202), (303, 303)]

    def test_re_sent_sync_of_same_record_replaces_the_last(self) -> None:
        recent = RecentSyncs(capacity=8, spacing=101)
        recent.add(0, 0)
        recent.add(500, 500)
        recent.add(500, 501)
        assert recent.syncs() == [(0, 0), (500, 501)]

    def test_redundant_sync_is_thinned(self) -> None:
        # 11 and 22 fall within lag.max + 1 of 0: translating through 0 re-reads at most lag.max.
        recent = RecentSyncs(capacity=8, spacing=101)
        for up, down in ((0, 0), (11, 10), (22, 20), (110, 100), (122, 110)):
            recent.add(up, down)
        assert recent.syncs() == [(0, 0), (110, 100), (122, 110)]

    def test_upstream_rewind_resets(self) -> None:
        recent = RecentSyncs(capacity=8, spacing=101)
        recent.add(500, 500)
        recent.add(900, 900)
        recent.add(3, 1000)  # the source topic was recreated
        assert recent.syncs() == [(3, 1000)]

    def test_target_truncation_resets(self) -> None:
        recent = RecentSyncs(capacity=8, spacing=101)
        recent.add(500, 500)
        recent.add(900, 900)
        recent.add(950, 20)
        assert recent.syncs() == [(950, 20)]

    def test_compaction_keeps_the_newest_capacity(self) -> None:
        recent = RecentSyncs(capacity=8, spacing=1)
        for up in range(0, 40, 2):
            recent.add(up, up)
            assert len(recent) < 8 + 8 // 4
        assert recent.syncs()[-1] == (38, 38) and len(recent) >= 8
        assert recent.syncs() == [(up, up) for up in range(40 - 2 * len(recent), 40, 2)]

    def test_at_or_before(self) -> None:
        recent = RecentSyncs(capacity=8, spacing=101)
        for up in (10, 200, 400):
            recent.add(up, up + 1000)
        assert recent.at_or_before(9) is None
        assert recent.at_or_before(10) == (10, 1010)
        assert recent.at_or_before(399) == (200, 1200)
        assert recent.at_or_before(10**12) == (400, 1400)

    @pytest.mark.parametrize("capacity, spacing", [(0, 101), (8, 0)])
    def test_rejects_bad_arguments(self, capacity: int, spacing: int) -> None:
        with pytest.raises(ValueError, match="capacity|spacing"):
            RecentSyncs(capacity, spacing)


def store_of(syncs: list[tuple[int, int]], capacity: int, spacing: int = 101,
             must_read_to_end: bool = False) -> OffsetSyncStore:
    store = OffsetSyncStore(must_read_to_end, recent_capacity=capacity, spacing=spacing)
    for up, down in syncs:
        store.add("t", 0, up, down)
    store.mark_read_to_end()
    return store


class TestStoreWithRecentSyncs:
    def test_lagging_group_translates_tightly(self) -> None:
        # The issue's scenario: MM2's slots keep {0, 404, 808, 909, 999} and answer 1, 1, 405.
        syncs = [(up, up) for up in range(0, 1000, 101)] + [(999, 999)]
        mm2, ours = store_of(syncs, 0), store_of(syncs, 1024)
        assert [mm2.translate_downstream("g1", "t", 0, g) for g in (300, 240, 517)] == [1, 1, 405]
        assert [ours.translate_downstream("g1", "t", 0, g) for g in (300, 240, 517)] == [203, 203, 506]

    def test_disabled_is_mm2(self) -> None:
        store = store_of([(0, 0), (101, 101)], 0)
        assert store.recent("t", 0) == []

    def test_initial_read_trusts_only_the_newest_sync(self) -> None:
        # KAFKA-16622: without the previous checkpoints, older syncs could move a group backwards.
        store = OffsetSyncStore(True, recent_capacity=64, spacing=101)
        for up in (0, 101, 202):
            store.add("t", 0, up, up)
        store.mark_read_to_end()
        store.add("t", 0, 303, 303)
        assert store.recent("t", 0) == [(202, 202), (303, 303)]
        assert store.translate_downstream("g", "t", 0, 150) is None

    def test_group_before_every_sync_is_untranslatable(self) -> None:
        store = store_of([(50, 60), (151, 161)], 64)
        assert store.translate_downstream("g", "t", 0, 49) is None


class LaggingProducer:
    """A syncs producer whose broker answers only when the emitter waits (`poll` with a timeout); cast to
    the Producer it stands in for."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, int]] = []
        self._waiting: list[Callable[[None, None], None]] = []

    def produce(self, topic: str, key: bytes, value: bytes, partition: int,
                on_delivery: Callable[[None, None], None]) -> None:
        sync = OffsetSync.decode(key, value)
        self.sent.append((sync.partition, sync.upstream_offset, sync.downstream_offset))
        self._waiting.append(on_delivery)

    def poll(self, timeout: float) -> int:
        if timeout <= 0:
            return 0
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback(None, None)
        return len(waiting)

    def flush(self, timeout: float) -> int:
        self.poll(1)
        return 0


def replicated_stream(rng: random.Random, count: int) -> list[tuple[int, int]]:
    """(upstream, downstream) of one partition: compaction and transaction markers leave upstream gaps,
    an exactly-once target's commit markers leave downstream gaps."""
    up, down, records = rng.randrange(0, 50), rng.randrange(0, 50), []
    for _ in range(count):
        records.append((up, down))
        up += 1 + (rng.randrange(1, 30) if rng.random() < 0.01 else 0) + (1 if rng.random() < 0.02 else 0)
        down += 2 if rng.random() < 0.04 else 1
    return records


def emit(rng: random.Random, records: list[tuple[int, int]], lag_max: int) -> list[tuple[int, int]]:
    """Syncs the real emitter sends for these acknowledgements, arriving in random bursts.

    Between two bursts the broker answers a few times (each `poll` with a timeout is one round trip
    returning the 10 permits): syncs leave at most 10 per round trip, as in MM2."""
    producer = LaggingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", lag_max)
    position = 0
    while position < len(records):
        size = rng.choice([1, 5, 50, 200, 500])
        for up, down in records[position:position + size]:
            emitter.acknowledged("t", 0, up, down)
        position += size
        for _ in range(rng.randrange(1, 4)):
            producer.poll(0.01)  # delivery reports return permits
        if rng.random() < 0.2:
            emitter.flush_delayed()
    emitter.close(1)
    return [(up, down) for _, up, down in producer.sent]


@pytest.mark.parametrize("seed", range(20))
def test_translation_never_skips_and_keeps_the_bound_in_the_recent_span(seed: int) -> None:
    rng = random.Random(seed)
    lag_max = rng.choice([20, 100])
    records = replicated_stream(rng, 6000)
    syncs = emit(rng, records, lag_max)
    ours = store_of(syncs, 64, lag_max + 1)
    mm2 = store_of(syncs, 0)
    oldest_recent = ours.recent("t", 0)[0][0]

    ups = [up for up, _ in records]
    downs = [down for _, down in records]
    index, checked = 0, 0
    for g in range(ups[0], ups[-1] + 1):
        while ups[index] < g:
            index += 1
        exact = downs[index]  # the first record at or after g
        translated = ours.translate_downstream("g", "t", 0, g)
        slots = mm2.translate_downstream("g", "t", 0, g)
        assert translated is not None and translated <= exact, f"group at {g} would skip records"
        assert slots is not None and slots <= translated
        if g >= oldest_recent:
            re_read = index - bisect_left(downs, translated)
            assert re_read <= lag_max, f"group at {g} re-reads {re_read}"
            checked += 1
    assert checked > 0
