"""OffsetSyncWriter: when a sync is due, pending/delayed queues, in-flight bound."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from driver.offset_sync_writer import (
    MAX_IN_FLIGHT_SYNCS,
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

    def test_only_latest_sync_per_partition_is_kept(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send)
        for offset in range(3):
            queue.queue_later(sync(0, offset, offset))
            queue.queue_now(sync(1, offset, offset))

        assert queue.delayed() == (sync(0, 2, 2),)
        assert queue.pending() == (sync(1, 2, 2),)

    def test_promote_delayed_makes_them_pending_newest_winning(self) -> None:
        queue = OffsetSyncQueue(FakeProducer().send)
        queue.queue_now(sync(0, 1, 1))
        queue.queue_later(sync(0, 2, 2))
        queue.queue_later(sync(1, 9, 9))

        queue.promote_delayed()

        assert queue.pending() == (sync(0, 2, 2), sync(1, 9, 9))
        assert queue.delayed() == ()

    def test_fire_pending_sends_in_first_queued_order(self) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send)
        for partition in (3, 1, 2):
            queue.queue_now(sync(partition, 0, 0))
        queue.queue_now(sync(3, 1, 1))  # keeps partition 3's place in line

        assert queue.fire_pending() == 3
        assert producer.sent == [sync(3, 1, 1), sync(1, 0, 0), sync(2, 0, 0)]
        assert queue.pending() == ()

    def test_in_flight_is_capped_at_ten(self) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send)
        for partition in range(15):
            queue.queue_now(sync(partition, 0, 0))

        assert queue.fire_pending() == MAX_IN_FLIGHT_SYNCS == 10
        assert queue.in_flight == 10
        assert len(queue.pending()) == 5

        producer.callbacks[0](None)
        assert queue.fire_pending() == 1
        assert [s.partition for s in producer.sent] == list(range(11))

        producer.complete_all()
        assert queue.in_flight == 0
        assert queue.fire_pending() == 4
        assert queue.pending() == ()

    def test_failed_delivery_releases_permit(self, caplog: pytest.LogCaptureFixture) -> None:
        producer = FakeProducer()
        queue = OffsetSyncQueue(producer.send, max_in_flight=1)
        queue.queue_now(sync(0, 0, 0))
        queue.queue_now(sync(1, 0, 0))
        queue.fire_pending()

        producer.complete_all(RuntimeError("broker down"))

        assert queue.in_flight == 0
        assert "broker down" in caplog.text
        assert queue.fire_pending() == 1

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

    def test_requeue_yields_to_newer_sync_of_partition(self) -> None:
        queue_ref: list[OffsetSyncQueue] = []

        def racing_send(sync: QueuedOffsetSync, on_complete: DeliveryCallback) -> None:
            queue_ref[0].queue_now(QueuedOffsetSync("t", 0, 5, 5))  # arrives meanwhile
            raise BufferError("local queue full")

        queue = OffsetSyncQueue(racing_send)
        queue_ref.append(queue)
        queue.queue_now(sync(0, 0, 0))

        with pytest.raises(BufferError):
            queue.fire_pending()

        assert queue.pending() == (sync(0, 5, 5),)

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

    def test_backpressure_keeps_latest_pending_sync(self) -> None:
        producer = FakeProducer()
        writer = OffsetSyncWriter(producer.send, offset_lag_max=0, max_in_flight=1)
        for offset in range(5):
            writer.on_record_committed("t", 0, offset, offset)

        assert producer.sent == [sync(0, 0, 0)]
        assert writer.queue.pending() == (sync(0, 4, 4),)

        producer.complete_all()
        writer.queue.fire_pending()
        assert producer.sent[-1] == sync(0, 4, 4)

    def test_negative_lag_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="offset.lag.max"):
            OffsetSyncWriter(FakeProducer().send, offset_lag_max=-5)
