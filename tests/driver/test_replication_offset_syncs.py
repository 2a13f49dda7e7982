"""The emitter's hot path sends exactly the offset syncs MM2's OffsetSyncWriter decides (no broker)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from contract.records.mm2 import OffsetSync
from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.offset_sync_writer import OffsetSyncWriter, QueuedOffsetSync


class RecordingProducer:
    """Keeps produced syncs and acknowledges them on the next poll, like a healthy producer."""

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
    emitter = OffsetSyncEmitter(producer, "mm2-offset-syncs.west.internal", lag_max)  # type: ignore[arg-type]
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
