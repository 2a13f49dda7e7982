"""OffsetSyncWriter: when a sync is due, pending/delayed queues, in-flight bound."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from driver.offset_sync_writer import (
    MAX_IN_FLIGHT_SYNCS,
    MAX_PENDING_PER_PARTITION,
    DeliveryCallback,
    OffsetSyncQueue,
    OffsetSyncWriter,
    PartitionState,
    QueuedOffsetSync,
)


@dataclass
class FakeProducer:
    """Records sends; completes them only when the test says so."""

    sent: list[QueuedOffsetSync] = field(default_factory=list)
    callbacks: list[DeliveryCallback] = field(default_factory=list)

    def send(self, sync: QueuedOffsetSync, on_complete: DeliveryCallback) -> None:
        self.sent.append(sync)
        self.callbacks.append(on_complete)

    def complete_all(self, error: BaseException | None = None) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback(error)


def sync(partition: int, upstream: int, downstream: int, topic: str = "t") -> QueuedOffsetSync:
    return QueuedOffsetSync(topic, partition, upstream, downstream)


class TestPartitionState:
    def test_first_record_of_lifetime_is_synced(self) -> None:
        state = PartitionState(offset_lag_max=100)
        assert state.update(0, 0) is True

    def test_contiguous_records_within_lag_are_not_synced(self) -> None:
        state = PartitionState(offset_lag_max=100)
        state.update(0, 0)
        state.reset()

        assert [state.update(up, up) for up in range(1, 101)] == [False] * 100

    def test_lag_counts_from_last_sync_plus_one(self) -> None:
        # Translation can answer last sync + 1, so the 101st record after a
        # sync at downstream 0 is the first one 100 behind that answer.
        state = PartitionState(offset_lag_max=100)
        state.update(0, 0)
        state.reset()
        for offset in range(1, 101):
            state.update(offset, offset)

        assert state.update(101, 101) is True
        assert state.last_sync_downstream == 101

    def test_zero_lag_syncs_every_record(self) -> None:
        state = PartitionState(offset_lag_max=0)
        results = []
        for offset in range(5):
            results.append(state.update(offset, offset))
            state.reset()
        assert results == [True] * 5

    def test_upstream_gap_forces_sync(self) -> None:
        state = PartitionState(offset_lag_max=100)
        state.update(10, 0)
        state.reset()
        state.update(11, 1)

        assert state.update(15, 2) is True  # 12..14 compacted or filtered

    def test_target_truncation_forces_sync(self) -> None:
        state = PartitionState(offset_lag_max=100)
        state.update(10, 500)
        state.reset()
        state.update(11, 501)

        assert state.update(12, 3) is True

    def test_due_sync_stays_due_until_reset(self) -> None:
        state = PartitionState(offset_lag_max=100)
        assert state.update(0, 0) is True
        assert state.update(1, 1) is True  # MM2 compatible: sticky until reset
        state.reset()
        assert state.update(2, 2) is False

    def test_previous_offsets_follow_every_record(self) -> None:
        state = PartitionState(offset_lag_max=100)
        state.update(3, 7)
        state.reset()
        state.update(4, 8)

        assert (state.previous_upstream, state.previous_downstream) == (4, 8)
        assert state.last_sync_downstream == 7

    def test_negative_lag_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="offset.lag.max"):
            PartitionState(offset_lag_max=-1)


class TestOffsetSyncQueue:
    def test_due_sync_replaces_delayed_one_of_same_partition(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send)
        queue.queue_later(sync(0, 1, 1))
        queue.queue_later(sync(1, 5, 5))
        queue.queue_now(sync(0, 2, 2))

        assert queue.pending() == (sync(0, 2, 2),)
        assert queue.delayed() == (sync(1, 5, 5),)

    def test_delayed_keeps_only_latest_per_partition(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send)
        for offset in range(3):
            queue.queue_later(sync(0, offset, offset))

        assert queue.delayed() == (sync(0, 2, 2),)

    def test_due_syncs_queue_in_order_without_overwrite(self) -> None:
        # No permit free: every due sync of the burst waits, none replaces another (MM2 keeps the last).
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=1, offset_lag_max=100)
        queue.queue_now(sync(9, 0, 0))
        queue.fire_pending()
        for offset in (0, 101, 202, 303, 404):
            queue.queue_now(sync(0, offset, offset))

        assert queue.pending() == tuple(sync(0, o, o) for o in (0, 101, 202, 303, 404))

    def test_redundant_pending_sync_is_thinned(self) -> None:
        # a sent, b waiting, c within lag.max + 1 of a: translating through a still keeps the bound.
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=1, offset_lag_max=100)
        queue.queue_now(sync(0, 0, 0))
        queue.fire_pending()
        queue.queue_now(sync(0, 11, 10))
        queue.queue_now(sync(0, 22, 20))
        queue.queue_now(sync(0, 120, 101))
        queue.queue_now(sync(0, 131, 111))

        assert producer.sent == [sync(0, 0, 0)]
        assert queue.pending() == (sync(0, 120, 101), sync(0, 131, 111))
        assert queue.thinned == 2

    def test_first_sync_and_backward_syncs_are_never_thinned(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send, max_in_flight=1, offset_lag_max=100)
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()  # takes the only permit
        queue.queue_now(sync(0, 0, 0))
        queue.queue_now(sync(0, 5, 5))
        queue.queue_now(sync(0, 6, 2))  # the target was truncated
        queue.queue_now(sync(0, 3, 7))  # the source was rewound

        assert queue.pending() == (sync(0, 0, 0), sync(0, 5, 5), sync(0, 6, 2), sync(0, 3, 7))
        assert queue.thinned == 0

    def test_hard_cap_coalesces_newest(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send, max_in_flight=1, offset_lag_max=0)
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()
        offsets = range(0, 3 * MAX_PENDING_PER_PARTITION, 2)  # 2 apart: never redundant at lag 0
        for offset in offsets:
            queue.queue_now(sync(0, offset, offset))

        pending = queue.pending()
        assert len(pending) == MAX_PENDING_PER_PARTITION
        kept = offsets[MAX_PENDING_PER_PARTITION - 2]
        assert pending[-2] == sync(0, kept, kept)
        assert pending[-1] == sync(0, offsets[-1], offsets[-1])
        assert queue.coalesced == len(offsets) - MAX_PENDING_PER_PARTITION

    def test_promoted_delayed_does_not_replace_pending_due_sync(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send, max_in_flight=1, offset_lag_max=0)
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()
        queue.queue_now(sync(0, 1, 1))
        queue.queue_later(sync(0, 5, 5))

        queue.promote_delayed()

        assert queue.pending() == (sync(0, 1, 1), sync(0, 5, 5))

    def test_release_refills_from_pending(self) -> None:
        # A permit coming back sends the next sync at once, without waiting for a tick.
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=1)
        queue.queue_now(sync(0, 0, 0))
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()
        assert producer.sent == [sync(0, 0, 0)]

        producer.callbacks[0](None)

        assert producer.sent == [sync(0, 0, 0), sync(1, 0, 0)]
        assert queue.pending() == () and queue.in_flight == 1

    def test_promote_delayed_queues_them_behind_pending(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send, max_in_flight=1, offset_lag_max=0)
        queue.queue_now(sync(2, 0, 0))
        queue.fire_pending()
        queue.queue_now(sync(0, 1, 1))
        queue.queue_later(sync(0, 2, 2))
        queue.queue_later(sync(1, 9, 9))

        queue.promote_delayed()

        assert queue.pending() == (sync(0, 1, 1), sync(0, 2, 2), sync(1, 9, 9))
        assert queue.delayed() == ()

    def test_fire_pending_sends_in_first_queued_order(self) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send)
        for partition in (3, 1, 2):
            queue.queue_now(sync(partition, 0, 0))
        queue.queue_now(sync(3, 1, 1))  # behind the others: first queued, first sent

        assert queue.fire_pending() == 4
        assert producer.sent == [sync(3, 0, 0), sync(1, 0, 0), sync(2, 0, 0), sync(3, 1, 1)]
        assert queue.pending() == ()

    def test_in_flight_is_capped_at_ten(self) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send)
        for partition in range(15):
            queue.queue_now(sync(partition, 0, 0))

        assert queue.fire_pending() == MAX_IN_FLIGHT_SYNCS == 10
        assert queue.in_flight == 10
        assert len(queue.pending()) == 5

        producer.callbacks[0](None)  # the permit refills at once
        assert [s.partition for s in producer.sent] == list(range(11))
        assert queue.in_flight == 10

        producer.complete_all()
        producer.complete_all()
        assert queue.in_flight == 0
        assert queue.pending() == ()
        assert [s.partition for s in producer.sent] == list(range(15))

    def test_failed_delivery_releases_permit(self, caplog: pytest.LogCaptureFixture) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=1)
        queue.queue_now(sync(0, 0, 0))
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()

        producer.complete_all(RuntimeError("broker down"))

        assert "broker down" in caplog.text
        assert producer.sent == [sync(0, 0, 0), sync(1, 0, 0)]  # the freed permit sent the next one
        assert queue.in_flight == 1

    def test_duplicate_completion_does_not_release_twice(self) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=2)
        queue.queue_now(sync(0, 0, 0))
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()

        producer.callbacks[0](None)
        producer.callbacks[0](None)

        assert queue.in_flight == 1

    def test_send_raising_returns_permit_requeues_and_propagates(self) -> None:
        attempts: list[QueuedOffsetSync] = []

        def full_then_ok(sync: QueuedOffsetSync, on_complete: DeliveryCallback) -> None:
            attempts.append(sync)
            if len(attempts) == 1:
                raise BufferError("local queue full")
            on_complete(None)

        queue = OffsetSyncQueue(full_then_ok, max_in_flight=1)
        queue.queue_now(sync(0, 0, 0))
        queue.queue_now(sync(1, 0, 0))

        with pytest.raises(BufferError):
            queue.fire_pending()

        assert queue.in_flight == 0
        assert queue.pending() == (sync(0, 0, 0), sync(1, 0, 0))
        assert queue.fire_pending() == 2
        assert attempts == [sync(0, 0, 0), sync(0, 0, 0), sync(1, 0, 0)]

    def test_requeue_keeps_both_syncs_of_partition_in_order(self) -> None:
        queue_ref: list[OffsetSyncQueue] = []

        def racing_send(sync: QueuedOffsetSync, on_complete: DeliveryCallback) -> None:
            queue_ref[0].queue_now(QueuedOffsetSync("t", 0, 500, 500))  # arrives meanwhile
            raise BufferError("local queue full")

        queue = OffsetSyncQueue(racing_send)
        queue_ref.append(queue)
        queue.queue_now(sync(0, 0, 0))

        with pytest.raises(BufferError):
            queue.fire_pending()

        assert queue.pending() == (sync(0, 0, 0), sync(0, 500, 500))

    def test_completion_inside_send_is_handled(self) -> None:
        sent: list[QueuedOffsetSync] = []

        def immediate_send(sync: QueuedOffsetSync, on_complete: DeliveryCallback) -> None:
            sent.append(sync)
            on_complete(None)

        queue = OffsetSyncQueue(immediate_send, max_in_flight=1)
        for partition in range(25):
            queue.queue_now(sync(partition, 0, 0))

        assert queue.fire_pending() == 25
        assert queue.in_flight == 0

    def test_completions_from_another_thread_keep_count_exact(self) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=10)
        for partition in range(10):
            queue.queue_now(sync(partition, 0, 0))
        queue.fire_pending()

        threads = [threading.Thread(target=callback, args=(None,)) for callback in producer.callbacks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert queue.in_flight == 0

    def test_rejects_non_positive_bound(self) -> None:
        with pytest.raises(ValueError, match="max_in_flight"):
            OffsetSyncQueue(FakeProducer().send, max_in_flight=0)


class TestOffsetSyncWriter:
    def test_committed_records_emit_first_gap_and_lag_syncs(self) -> None:
        producer = FakeProducer()
        writer = OffsetSyncWriter(producer.send, offset_lag_max=3)
        records = [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (9, 6), (10, 7)]
        for upstream, downstream in records:
            writer.on_record_committed("t", 0, upstream, downstream)
            producer.complete_all()

        assert producer.sent == [sync(0, 0, 0), sync(0, 4, 4), sync(0, 9, 6)]
        assert writer.queue.delayed() == (sync(0, 10, 7),)

    def test_flush_sends_low_volume_partition_position(self) -> None:
        # A quiet partition would otherwise stay up to offset.lag.max behind.
        producer = FakeProducer()
        writer = OffsetSyncWriter(producer.send)
        for offset in range(5):
            writer.on_record_committed("quiet", 0, offset, offset)

        assert producer.sent == [sync(0, 0, 0, topic="quiet")]

        writer.on_offsets_flushed()

        assert producer.sent[-1] == sync(0, 4, 4, topic="quiet")
        assert writer.queue.delayed() == ()

    def test_partitions_are_tracked_independently(self) -> None:
        producer = FakeProducer()
        writer = OffsetSyncWriter(producer.send)
        assert writer.maybe_queue("t", 0, 0, 0) is True
        assert writer.maybe_queue("t", 1, 0, 0) is True
        assert writer.maybe_queue("u", 0, 0, 0) is True
        assert writer.maybe_queue("t", 0, 1, 1) is False

        state = writer.partition_state("t", 0)
        assert state is not None and state.sync_due is False
        assert writer.partition_state("t", 9) is None

    def test_backpressure_keeps_every_due_sync(self) -> None:
        producer = FakeProducer()
        writer = OffsetSyncWriter(producer.send, offset_lag_max=0, max_in_flight=1)
        for offset in range(5):
            writer.on_record_committed("t", 0, offset, offset)

        assert producer.sent == [sync(0, 0, 0)]
        assert writer.queue.pending() == tuple(sync(0, o, o) for o in range(1, 5))

        for _ in range(4):
            producer.complete_all()
        assert producer.sent == [sync(0, o, o) for o in range(5)]

    def test_forget_makes_next_record_first_of_lifetime(self) -> None:
        producer = FakeProducer()
        writer = OffsetSyncWriter(producer.send)
        for offset in range(5):
            writer.on_record_committed("t", 0, offset, offset)
        assert writer.maybe_queue("t", 0, 5, 5) is False

        writer.forget([("t", 0)])

        assert writer.partition_state("t", 0) is None
        assert writer.maybe_queue("t", 0, 6, 6) is True

    def test_negative_lag_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="offset.lag.max"):
            OffsetSyncWriter(FakeProducer().send, offset_lag_max=-5)
