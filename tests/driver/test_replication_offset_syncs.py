"""The emitter's hot path sends exactly the offset syncs MM2's OffsetSyncWriter decides (no broker)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import cast

import pytest
from confluent_kafka import Producer

from contract.records.mm2 import OffsetSync
from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.offset_sync_writer import OffsetSyncWriter, QueuedOffsetSync


class RecordingProducer:
    """Keeps produced syncs and acknowledges them on the next poll, like a healthy producer. It stands in
    for (and is cast to) confluent_kafka's Producer: produce, poll and flush are what the emitter calls."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int, int]] = []
        self._waiting: list[Callable[[None, None], None]] = []

    def produce(self, topic: str, key: bytes, value: bytes, partition: int,
                on_delivery: Callable[[None, None], None]) -> None:
        assert partition == 0
        sync = OffsetSync.decode(key, value)
        self.sent.append((sync.topic, sync.partition, sync.upstream_offset, sync.downstream_offset))
        self._waiting.append(on_delivery)

    def poll(self, _timeout: float) -> int:
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback(None, None)
        return len(waiting)

    def flush(self, timeout: float) -> int:
        self.poll(max(timeout, 0.001))
        return 0


def reference(records: list[tuple[str, int, int, int]], lag_max: int, flush_every: int) -> list[tuple]:
    sent: list[tuple] = []

    def send(sync: QueuedOffsetSync, done: Callable[[BaseException | None], None]) -> None:
        sent.append(tuple(sync))
        done(None)

    writer = OffsetSyncWriter(send, lag_max)
    for i, record in enumerate(records, 1):
        writer.on_record_committed(*record)
        if i % flush_every == 0:
            writer.on_offsets_flushed()
    writer.on_offsets_flushed()
    return sent


def emitted(records: list[tuple[str, int, int, int]], lag_max: int, flush_every: int) -> list[tuple]:
    producer = RecordingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", lag_max)
    for i, record in enumerate(records, 1):
        emitter.acknowledged(*record)
        emitter.send_due()
        if i % flush_every == 0:
            emitter.flush_delayed()
    emitter.flush_delayed()
    return producer.sent


def replicated(seed: int, count: int) -> list[tuple[str, int, int, int]]:
    """Two partitions with upstream gaps (compaction), downstream jumps and a truncated target."""
    rng = random.Random(seed)
    positions = {0: [0, 0], 1: [0, 500]}
    records = []
    for _ in range(count):
        partition = rng.choice([0, 1])
        up, down = positions[partition]
        up += 3 if rng.random() < 0.02 else 1
        down = down - 40 if rng.random() < 0.005 else down + (2 if rng.random() < 0.02 else 1)
        positions[partition] = [up, down]
        records.append(("orders", partition, up, down))
    return records


@pytest.mark.parametrize("seed, lag_max, flush_every", [(1, 100, 1000), (2, 10, 37), (3, 0, 50), (4, 100, 7)])
def test_same_syncs_as_the_mm2_writer(seed: int, lag_max: int, flush_every: int) -> None:
    records = replicated(seed, 3000)
    assert emitted(records, lag_max, flush_every) == reference(records, lag_max, flush_every)


def test_quiet_partition_reaches_its_latest_position_on_flush() -> None:
    records = [("t", 0, offset, offset) for offset in range(5)]
    sent = emitted(records, 100, 10_000)
    assert sent[0] == ("t", 0, 0, 0) and sent[-1] == ("t", 0, 4, 4)


class LaggingProducer(RecordingProducer):
    """Acknowledges only on a poll that waits: inside a burst (`poll(0)`) the broker has not answered."""

    def poll(self, timeout: float) -> int:
        return super().poll(timeout) if timeout > 0 else 0


def burst(emitter: OffsetSyncEmitter, records: list[tuple[str, int, int, int]]) -> None:
    """Acknowledgements as one target producer poll delivers them: no tick in between."""
    for record in records:
        emitter.acknowledged(*record)


def interleaved(partitions: int, count: int) -> list[tuple[str, int, int, int]]:
    return [("orders", p, offset, offset) for offset in range(count) for p in range(partitions)]


def test_bursty_acknowledgements_send_every_due_sync() -> None:
    # The regression behind "first syncs at 707/909": 3,000 acks in one poll kept only the last sync.
    producer = RecordingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", 100)
    burst(emitter, interleaved(3, 1000))
    emitter.send_due()
    emitter.flush_delayed()

    for partition in range(3):
        syncs = [(up, down) for _, p, up, down in producer.sent if p == partition]
        assert syncs[0] == (0, 0)
        assert {up for up, _ in syncs} >= set(range(0, 1000, 101))
        assert syncs[-1] == (999, 999)


def test_syncs_wait_for_permits_and_none_is_lost_when_the_broker_is_slow() -> None:
    producer = LaggingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", 100)
    burst(emitter, interleaved(3, 1000))

    assert len(producer.sent) == 10  # MAX_IN_FLIGHT_SYNCS: the rest wait, in order
    for _ in range(5):
        producer.poll(0.1)  # delivery reports return permits, which send the next syncs at once
    per_partition = {p: [up for _, q, up, _ in producer.sent if q == p] for p in range(3)}
    assert all(ups == list(range(0, 1000, 101)) for ups in per_partition.values())


def test_close_drains_more_than_ten_pending() -> None:
    producer = LaggingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", 100)
    burst(emitter, interleaved(3, 1000))
    assert len(emitter.writer.queue.pending()) > 10

    emitter.close(timeout_s=5)

    assert emitter.writer.queue.pending() == () and emitter.writer.queue.in_flight == 0
    for partition in range(3):
        ups = [up for _, p, up, _ in producer.sent if p == partition]
        assert ups == [*range(0, 1000, 101), 999]


def test_forgotten_partition_syncs_its_next_record_and_its_last_position() -> None:
    producer = RecordingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", 100)
    burst(emitter, [("t", 0, offset, offset) for offset in range(50)])
    emitter.forget([("t", 0)])  # revoked, then assigned again
    emitter.acknowledged("t", 0, 50, 50)
    emitter.send_due()

    assert producer.sent == [("t", 0, 0, 0), ("t", 0, 49, 49), ("t", 0, 50, 50)]


def transactional(count: int, per_transaction: int) -> list[tuple[str, int, int, int]]:
    """A commit marker after every transaction upstream, and after every 25 records downstream."""
    records, up, down = [], 0, 0
    for i in range(count):
        records.append(("tx", 0, up, down))
        up += 2 if (i + 1) % per_transaction == 0 else 1
        down += 2 if (i + 1) % 25 == 0 else 1
    return records


def re_read_bound(records: list[tuple[str, int, int, int]], syncs: list[tuple[int, int]]) -> int:
    """Worst records re-read over every upstream offset, translating as MM2 does (+1 past a sync)."""
    syncs = sorted(syncs)
    worst, s = 0, -1
    downs = [down for *_, down in records]
    ups = [up for _, _, up, _ in records]
    i = 0
    for g in range(ups[0], ups[-1] + 1):
        while s + 1 < len(syncs) and syncs[s + 1][0] <= g:
            s += 1
        while ups[i] < g:
            i += 1
        exact = downs[i]
        translated = syncs[s][1] + (0 if syncs[s][0] == g else 1)
        assert translated <= exact, f"group at {g} would skip records"
        worst = max(worst, sum(1 for d in downs if translated <= d < exact))
    return worst


def test_transactional_commit_burst_keeps_bound() -> None:
    # One committed transaction replays its acks at once; every 10 records a marker leaves a gap, so a
    # sync is due for each. With permits busy, the redundant ones are thinned, never the bound.
    records = transactional(3000, 10)
    producer = LaggingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", 100)
    burst(emitter, records)
    queue = emitter.writer.queue
    assert queue.thinned > 0 and queue.coalesced == 0
    assert len(queue.pending()) < 3000 // 101 * 2 + 2

    emitter.close(timeout_s=5)

    syncs = [(up, down) for *_, up, down in producer.sent]
    assert syncs[0] == (0, 0) and syncs[-1] == records[-1][2:]
    assert re_read_bound(records, syncs) <= 100


def runs_of(records: list[tuple[str, int, int, int]], longest: int) -> list[list[tuple[str, int, int, int]]]:
    """Consecutive records of one partition at consecutive upstream and downstream offsets, at most
    `longest` each: what the writer acknowledges as one run."""
    runs: list[list[tuple[str, int, int, int]]] = []
    for record in records:
        last = runs[-1][-1] if runs else None
        if (last is not None and last[1] == record[1] and record[2] == last[2] + 1
                and record[3] == last[3] + 1 and len(runs[-1]) < longest):
            runs[-1].append(record)
        else:
            runs.append([record])
    return runs


@pytest.mark.parametrize("seed, lag_max, longest", [(1, 100, 500), (2, 10, 37), (3, 0, 50), (4, 100, 1)])
def test_a_run_fed_by_its_first_and_last_record_sends_the_syncs_of_feeding_each(
        seed: int, lag_max: int, longest: int) -> None:
    records = replicated(seed, 3000)
    each, runs = RecordingProducer(), RecordingProducer()
    per_record = OffsetSyncEmitter(cast(Producer, each), "mm2-offset-syncs.west.internal", lag_max)
    per_run = OffsetSyncEmitter(cast(Producer, runs), "mm2-offset-syncs.west.internal", lag_max)
    for i, run in enumerate(runs_of(records, longest)):
        burst(per_record, run)
        (topic, partition, first_up, first_down), (*_, last_up, last_down) = run[0], run[-1]
        per_run.acknowledged_run(topic, partition, first_up, first_down, last_up, last_down)
        for emitter in (per_record, per_run):
            emitter.send_due()
            if i % 13 == 0:
                emitter.flush_delayed()
    for emitter in (per_record, per_run):
        emitter.flush_delayed()
    assert runs.sent == each.sent and len(each.sent) > 30


def test_a_run_with_another_writers_records_in_between_syncs_true_positions() -> None:
    producer = RecordingProducer()
    emitter = OffsetSyncEmitter(cast(Producer, producer), "mm2-offset-syncs.west.internal", 100)
    emitter.acknowledged_run("t", 0, 0, 0, 9, 9)
    emitter.acknowledged_run("t", 0, 10, 15, 19, 27)  # 10 records over 13 target offsets
    emitter.send_due()
    emitter.flush_delayed()
    assert producer.sent == [("t", 0, 0, 0), ("t", 0, 19, 27)]
