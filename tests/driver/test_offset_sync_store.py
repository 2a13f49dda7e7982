"""OffsetSyncStore: history-based translation, its invariants and the +1 rule."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from driver.offset_sync_store import SYNCS_PER_PARTITION, OffsetSyncStore, SyncPoint
from driver.offset_sync_writer import DeliveryCallback, OffsetSyncWriter, QueuedOffsetSync, SyncSender

TOPIC = "orders"
PARTITION = 2


def ready_store() -> OffsetSyncStore:
    store = OffsetSyncStore()
    store.mark_read_to_end()
    return store


def translate(store: OffsetSyncStore, upstream_offset: int) -> int | None:
    return store.translate_downstream("g", TOPIC, PARTITION, upstream_offset)


def assert_invariants(slots: tuple[SyncPoint, ...]) -> None:
    """Invariants B and C for every pair of distinct slots, D for the last slot.

    Pairs are checked per run of identical slots: B's bound grows with j and C's
    with i, so the last index of the newer run against the first index of the
    older run is the tightest pair of the two runs.
    """
    assert len(slots) == SYNCS_PER_PARTITION
    runs = sync_runs(slots)
    for position, (_, newer_last, newer) in enumerate(runs):
        for older_first, _, older in runs[position + 1 :]:
            if newer.upstream_offset == older.upstream_offset:
                continue  # a re-emitted sync for the same record, as MM2 tolerates
            i, j = newer_last, older_first
            assert newer.upstream_offset <= older.upstream_offset + 2**j - 2**i, (i, j, slots)
            assert newer.upstream_offset >= older.upstream_offset + 2 ** max(i - 2, 0), (i, j, slots)
    assert slots[-1].upstream_offset == min(s.upstream_offset for s in slots)


def sync_runs(slots: tuple[SyncPoint, ...]) -> list[tuple[int, int, SyncPoint]]:
    """(first index, last index, sync) of each run of the same sync object."""
    runs: list[tuple[int, int, SyncPoint]] = []
    for index, sync in enumerate(slots):
        if runs and runs[-1][2] is sync:
            runs[-1] = (runs[-1][0], index, sync)
        else:
            runs.append((index, index, sync))
    assert len({id(sync) for _, _, sync in runs}) == len(runs), "a sync reappears after another"
    return runs


def distinct_count(slots: tuple[SyncPoint, ...]) -> int:
    return len(sync_runs(slots))


def test_refuses_translation_until_read_to_end() -> None:
    store = OffsetSyncStore()
    store.add(TOPIC, PARTITION, 100, 200)

    assert not store.ready
    assert translate(store, 100) is None
    assert translate(store, 200) is None

    store.mark_read_to_end()

    assert store.ready
    assert translate(store, 0) is None
    assert translate(store, 100) == 200
    assert translate(store, 200) == 201


def test_no_translation_without_sync_for_partition() -> None:
    store = ready_store()
    store.add(TOPIC, 0, 5, 5)

    assert translate(store, 5) is None
    assert store.syncs(TOPIC, PARTITION) == ()


def test_plus_one_rule_and_exact_translation() -> None:
    store = ready_store()

    store.add(TOPIC, PARTITION, 100, 200)
    assert translate(store, 150) == 201  # never dead-reckons 150 - 100 ahead

    store.add(TOPIC, PARTITION, 150, 251)
    assert translate(store, 150) == 251
    assert translate(store, 5) is None  # before any sync: lagging group

    store.add(TOPIC, PARTITION, 200, 10)  # target topic recreated
    assert translate(store, 200) == 10


def test_resent_sync_for_same_record_wins() -> None:
    # After a source task restart the same upstream record is replicated again
    # and lands further downstream; the newer sync must be the one used.
    store = ready_store()
    store.add(TOPIC, PARTITION, 0, 0)
    store.add(TOPIC, PARTITION, 100, 200)
    store.add(TOPIC, PARTITION, 100, 250)

    assert translate(store, 100) == 250
    assert translate(store, 101) == 251
    assert_invariants(store.syncs(TOPIC, PARTITION))


def test_first_sync_fills_every_slot() -> None:
    store = ready_store()
    store.add(TOPIC, PARTITION, 7, 70)

    slots = store.syncs(TOPIC, PARTITION)
    assert len(slots) == SYNCS_PER_PARTITION
    assert all(slot is slots[0] for slot in slots)
    assert slots[0] == SyncPoint(7, 70)


def test_lagging_group_translates_through_history_mm2_known_answers() -> None:
    # Same scenario and expected sync positions as MM2's own store test:
    # syncs every 10 offsets, 0..1000 during the initial read, then up to 10000.
    store = OffsetSyncStore(initialization_must_read_to_end=True)
    offset = 0
    while offset <= 1000:
        store.add(TOPIC, PARTITION, offset, offset)
        assert_invariants(store.syncs(TOPIC, PARTITION))
        offset += 10
    store.mark_read_to_end()
    while offset <= 10000:
        store.add(TOPIC, PARTITION, offset, offset)
        assert_invariants(store.syncs(TOPIC, PARTITION))
        offset += 10

    stored = [1000, 4840, 6760, 8680, 9160, 9640, 9880, 9940, 9970, 9990, 10000]
    assert translate(store, 999) is None  # older than the last sync of the initial read
    for previous, sync_offset in zip(stored, stored[1:], strict=False):
        assert translate(store, sync_offset - 1) == previous + 1
    for sync_offset in stored:
        assert translate(store, sync_offset) == sync_offset
        assert translate(store, sync_offset + 1) == sync_offset + 1
        assert translate(store, sync_offset + 2) == sync_offset + 1


def test_upstream_rewind_discards_history() -> None:
    store = ready_store()
    for offset in range(0, 10_001, 10):
        store.add(TOPIC, PARTITION, offset, offset)

    store.add(TOPIC, PARTITION, 1500, 11000)

    slots = store.syncs(TOPIC, PARTITION)
    assert all(slot == SyncPoint(1500, 11000) for slot in slots)
    assert translate(store, 1499) is None
    assert translate(store, 1500) == 11000
    assert translate(store, 2000) == 11001


def test_compaction_gaps_translate_without_skipping() -> None:
    # Upstream 10..99 and 105..199 were compacted away; the target is contiguous.
    replicated = [(up, up) for up in range(10)]
    replicated += [(up, up - 90) for up in range(100, 105)]
    replicated += [(200, 15)]
    store = ready_store()
    sent: list[QueuedOffsetSync] = []
    writer = OffsetSyncWriter(delivering_into(store, sent), offset_lag_max=100)
    for upstream, downstream in replicated:
        writer.on_record_committed(TOPIC, PARTITION, upstream, downstream)

    assert [sync[2:] for sync in sent] == [(0, 0), (100, 10), (200, 15)]
    assert translate(store, 100) == 10
    assert translate(store, 150) == 11  # re-reads 101..104 rather than guessing
    assert translate(store, 200) == 15
    assert translate(store, 205) == 16
    assert translate(store, 50) == 1
    truth = ReplicatedPartition(replicated)
    for group_offset in range(0, 210):
        translated = translate(store, group_offset)
        assert translated is not None and translated <= truth.first_downstream_at_or_after(group_offset)


def test_initial_read_without_prior_checkpoints_keeps_only_latest_sync() -> None:
    syncs_topic = [(offset, offset * 2) for offset in range(0, 500, 3)]
    store = OffsetSyncStore(initialization_must_read_to_end=True)
    for upstream, downstream in syncs_topic:
        store.add(TOPIC, PARTITION, upstream, downstream)
    store.mark_read_to_end()

    assert set(store.syncs(TOPIC, PARTITION)) == {SyncPoint(498, 996)}
    assert translate(store, 300) is None


def test_restart_replaying_syncs_topic_rebuilds_same_store() -> None:
    rng = random.Random(7)
    syncs_topic: list[tuple[str, int, int, int]] = []
    live = ready_store()
    positions = {0: [0, 0], 1: [50, 0]}
    for _ in range(3000):
        partition = rng.choice((0, 1))
        position = positions[partition]
        position[0] += rng.choice((1, 1, 2, 17, 300))
        position[1] += 1
        record = (TOPIC, partition, position[0], position[1])
        syncs_topic.append(record)
        live.add(*record)

    restarted = OffsetSyncStore(initialization_must_read_to_end=False)
    for record in syncs_topic:
        restarted.add(*record)
    restarted.mark_read_to_end()

    for partition in (0, 1):
        assert restarted.syncs(TOPIC, partition) == live.syncs(TOPIC, partition)
        assert distinct_count(live.syncs(TOPIC, partition)) > 5
        for upstream in range(0, positions[partition][0] + 2, 37):
            assert restarted.translate_downstream("g", TOPIC, partition, upstream) == (
                live.translate_downstream("g", TOPIC, partition, upstream)
            )


@pytest.mark.parametrize("seed", range(6))
def test_invariants_hold_after_random_adds(seed: int) -> None:
    rng = random.Random(seed)
    store = ready_store()
    upstream = rng.randrange(1000)
    for step_index in range(1500):
        upstream += random_step(rng)
        store.add(TOPIC, PARTITION, upstream, step_index)
        slots = store.syncs(TOPIC, PARTITION)
        assert slots[0] == SyncPoint(upstream, step_index)  # invariant A
        assert_invariants(slots)


def most_expired_per_sync(first_offset: int, steps: list[int]) -> int:
    """Feed syncs spaced by `steps`; the most distinct syncs one add pushed out."""
    store = ready_store()
    store.add(TOPIC, PARTITION, first_offset, first_offset)
    offset, last_count, most = first_offset, 1, 0
    for step in steps:
        offset += step
        store.add(TOPIC, PARTITION, offset, offset)
        slots = store.syncs(TOPIC, PARTITION)
        assert slots[0].upstream_offset == offset  # invariant A
        assert slots[-1].upstream_offset == first_offset  # invariant D
        count = distinct_count(slots)
        most = max(most, last_count - count + 1)
        last_count = count
    assert_invariants(store.syncs(TOPIC, PARTITION))
    return most


@pytest.mark.parametrize("first_offset", [0, 1, 7, 29])
def test_consistently_spaced_syncs_expire_at_most_one(first_offset: int) -> None:
    step = 1
    while step < (2**63 - 1) // 100:  # every offset.lag.max shape: 1, 3, 7, 15, ...
        assert most_expired_per_sync(first_offset, [step] * 100) <= 1, step
        step = step * 2 + 1


@pytest.mark.parametrize("bits", [1, 2, 5, 11, 23, 40, 53])
def test_randomly_spaced_syncs_expire_boundedly(bits: int) -> None:
    # Steps differing by up to 2^n expire at most n + 2 syncs at once: the
    # layout is exponential. A large minimum step (offset.lag.max) changes nothing.
    rng = random.Random(bits)
    spread = 2**bits
    assert most_expired_per_sync(0, [rng.randrange(spread) for _ in range(300)]) <= bits + 2
    minimum = 2**16
    steps = [rng.randrange(minimum, minimum + spread) for _ in range(300)]
    assert most_expired_per_sync(0, steps) <= bits + 2


def test_dropped_syncs_expire_at_most_two() -> None:
    # Gaps of offset.lag.max or twice that, as if every other sync were lost.
    rng = random.Random(0)
    steps = [100 * rng.choice((1, 2)) for _ in range(3000)]
    assert most_expired_per_sync(0, steps) <= 2


def test_invariants_hold_near_the_largest_offsets() -> None:
    store = ready_store()
    upstream = 2**63 - 2**45
    for step in range(400):
        upstream += 2 ** (step % 39)
        store.add(TOPIC, PARTITION, upstream, step)
        assert_invariants(store.syncs(TOPIC, PARTITION))
    assert store.syncs(TOPIC, PARTITION)[0].upstream_offset == upstream


def test_earliest_sync_since_start_stays_in_last_slot() -> None:
    store = ready_store()
    for offset in range(0, 200_000, 7):
        store.add(TOPIC, PARTITION, offset, offset)
        assert store.syncs(TOPIC, PARTITION)[-1].upstream_offset == 0  # invariant D


def test_rejects_offsets_outside_a_java_long() -> None:
    store = ready_store()
    with pytest.raises(ValueError, match="outside"):
        store.add(TOPIC, PARTITION, -1, 0)
    with pytest.raises(ValueError, match="outside"):
        store.add(TOPIC, PARTITION, 0, 2**63)


@dataclass
class ReplicatedPartition:
    """What really happened: (upstream, downstream) of every replicated record."""

    records: list[tuple[int, int]]

    @property
    def downstream_end(self) -> int:
        return self.records[-1][1] + 1

    def first_downstream_at_or_after(self, upstream_offset: int) -> int:
        """Brute force: where the next record a group at `upstream_offset` needs landed."""
        later = [down for up, down in self.records if up >= upstream_offset]
        return min(later, default=self.downstream_end)


@pytest.mark.parametrize("seed", range(8))
def test_translation_never_skips_a_record(seed: int) -> None:
    rng = random.Random(1000 + seed)
    partition = simulate_replication(rng, rng.randrange(200, 1500))
    store = ready_store()
    sent: list[QueuedOffsetSync] = []
    writer = OffsetSyncWriter(delivering_into(store, sent), offset_lag_max=rng.choice((0, 3, 20, 100)))
    for upstream, downstream in partition.records:
        writer.on_record_committed(TOPIC, PARTITION, upstream, downstream)
        if rng.random() < 0.01:
            writer.on_offsets_flushed()

    slots = store.syncs(TOPIC, PARTITION)
    assert_invariants(slots)
    assert slots[0] == SyncPoint(sent[-1].upstream_offset, sent[-1].downstream_offset)
    assert {(s.upstream_offset, s.downstream_offset) for s in slots} <= {s[2:] for s in sent}
    oldest = slots[-1].upstream_offset
    previous: int | None = None
    last_upstream = partition.records[-1][0]
    for group_offset in range(partition.records[0][0] - 3, last_upstream + 5):
        result = translate(store, group_offset)
        assert (result is None) == (group_offset < oldest)
        if result is None:
            continue
        assert 0 <= result <= partition.first_downstream_at_or_after(group_offset)
        assert previous is None or result >= previous  # monotonic for a fixed store
        previous = result
    for sync in slots:
        assert translate(store, sync.upstream_offset) == sync.downstream_offset


def simulate_replication(rng: random.Random, count: int) -> ReplicatedPartition:
    """Upstream gaps (compaction, filtered records) and target gaps (txn markers)."""
    upstream, downstream = rng.randrange(100), rng.randrange(100)
    records = []
    for _ in range(count):
        records.append((upstream, downstream))
        upstream += 1 if rng.random() < 0.8 else rng.randrange(2, 60)
        downstream += 1 if rng.random() < 0.95 else rng.randrange(2, 4)
    return ReplicatedPartition(records)


def random_step(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.5:
        return 1
    if roll < 0.8:
        return rng.randrange(2, 50)
    return rng.randrange(1, 2 ** rng.randrange(6, 40))


def delivering_into(store: OffsetSyncStore, sent: list[QueuedOffsetSync] | None = None) -> SyncSender:
    """A `send` that lands the sync in the store at once, as a fast syncs topic would."""

    def send(sync: QueuedOffsetSync, on_complete: DeliveryCallback) -> None:
        if sent is not None:
            sent.append(sync)
        store.add(*sync)
        on_complete(None)

    return send
