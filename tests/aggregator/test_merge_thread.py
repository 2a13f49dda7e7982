"""The sink's merge thread (merge_thread): a live query's quick batches merged together within the
interval, a backlog's as they come, at once when the sink asks, what was handed over merged on close, and a
failed merge failing the sink's next batch. The window writer is a stand-in: its merges are tested on real
Redis in test_window_writer."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from aggregator import merge_thread
from aggregator.merge_thread import MergeThread
from aggregator.query import _SinkCloser

FAR = 3_600.0  # an interval no test waits out


class StandInWriter:
    """Records the batch ids of each merge; `fail_on` makes the merge holding that batch raise."""

    fail_on: int | None = None

    def __init__(self, client: object, scope: str) -> None:
        self.merges: list[list[int]] = []
        self.every_size: list[bool] = []  # of each merge: at every size, or the finest only
        self.merged = threading.Condition()

    def recover(self, committed: int | None) -> None:
        pass

    @property
    def behind(self) -> bool:
        return bool(self.merges) and not self.every_size[-1] and bool(self.merges[-1])

    def apply_all(self, batches: list, staged: bool = False, every_size: bool = True) -> None:
        assert staged  # committed batches, staged by the sink: none merged into a Redis that lost them
        ids = [i for i, _ in batches]
        if self.fail_on in ids:
            raise ConnectionError("Redis went away")
        with self.merged:
            self.merges.append(ids)
            self.every_size.append(every_size)
            self.merged.notify_all()

    def wait_for(self, merges: int) -> list[list[int]]:
        with self.merged:
            assert self.merged.wait_for(lambda: len(self.merges) >= merges, 30), self.merges
            return self.merges


@pytest.fixture
def thread(monkeypatch):
    monkeypatch.setattr(merge_thread, "WindowWriter", StandInWriter)
    monkeypatch.setattr(merge_thread, "MERGE_INTERVAL_S", FAR)
    made = MergeThread(None, "rollup_west:1", None)
    yield made
    made.close(30)


def test_quick_batches_wait_for_the_interval_and_are_merged_together(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", FAR)  # every batch after the first comes quickly
    thread.submit(1, None)
    assert thread._writer.wait_for(1) == [[1]]  # the first batch is merged at once
    thread.submit(2, None)
    thread.submit(3, None)
    assert thread._writer.merges == [[1]]  # waiting for the interval
    thread.wait_idle()
    assert thread._writer.merges == [[1], [2, 3]]


def test_batches_further_apart_than_the_gap_are_merged_as_they_come(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", 0.0)
    thread.submit(1, None)
    thread._writer.wait_for(1)
    thread.submit(2, None)
    assert thread._writer.wait_for(2) == [[1], [2]]


def test_close_merges_what_was_handed_over_then_ends(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", FAR)
    thread.submit(1, None)
    thread.submit(2, None)
    thread.close(30)
    assert thread._writer.merges[-1][-1] == 2 and sum(thread._writer.merges, []) == [1, 2]
    assert not thread._thread.is_alive()


def test_too_many_batches_waiting_are_merged_at_once(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", FAR)
    monkeypatch.setattr(merge_thread, "MAX_BEHIND", 3)
    thread.submit(1, None)
    thread._writer.wait_for(1)
    for batch_id in (2, 3, 4):  # the third waiting one is the limit: the sink waits for a merge
        thread.submit(batch_id, None)
    assert thread._writer.wait_for(2) == [[1], [2, 3, 4]]


def test_a_failed_merge_fails_the_next_batch_and_nothing_after_it_is_merged(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", 0.0)
    thread._writer.fail_on = 2
    thread.submit(1, None)
    thread._writer.wait_for(1)
    thread.submit(2, None)
    with pytest.raises(RuntimeError, match="merging windows failed .*Redis went away"):
        thread.wait_idle()
    with pytest.raises(RuntimeError, match="merged when the query restarts"):
        thread.submit(3, None)
    assert thread._writer.merges == [[1]]


def test_a_query_run_ends_only_its_own_sink():
    """A query restarted from its checkpoint keeps its id; the old run's end, heard after the new run
    started, closes the old run's sink and leaves the new one's merge thread running."""
    closed: list[str] = []

    class Sink:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    closer = _SinkCloser()
    closer.sinks.update({"run-1": Sink("old"), "run-2": Sink("new")})
    closer.onQueryTerminated(SimpleNamespace(id="query", runId="run-1"))
    assert closed == ["old"] and list(closer.sinks) == ["run-2"]


def test_the_coarser_sizes_wait_for_their_interval_and_the_sink_asking_merges_them(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", 0.0)
    monkeypatch.setattr(merge_thread, "COARSE_INTERVAL_S", FAR)
    for batch_id in (1, 2, 3):
        thread.submit(batch_id, None)
        thread._writer.wait_for(batch_id)
    # The first merge is at every size; then the finest only, until the interval is past.
    assert (thread._writer.merges, thread._writer.every_size) == ([[1], [2], [3]], [True, False, False])
    thread.wait_idle()  # the sink reads windows from Redis: every size is merged first
    assert (thread._writer.merges, thread._writer.every_size) == ([[1], [2], [3], []],
                                                                  [True, False, False, True])


def merge_two_at_the_finest_only(thread, monkeypatch) -> None:
    """Batches 1 and 2 merged at the finest size only: the coarser sizes' interval never runs out."""
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", 0.0)
    monkeypatch.setattr(merge_thread, "COARSE_INTERVAL_S", FAR)
    for batch_id in (1, 2):
        thread.submit(batch_id, None)
        thread._writer.wait_for(batch_id)


def test_past_the_interval_the_coarser_sizes_wait_for_every_third_merge(thread, monkeypatch):
    monkeypatch.setattr(merge_thread, "BATCH_GAP_S", 0.0)
    monkeypatch.setattr(merge_thread, "COARSE_INTERVAL_S", 0.0)  # merges further apart than the interval
    monkeypatch.setattr(merge_thread, "QUIET_S", FAR)
    for batch_id in range(1, 6):
        thread.submit(batch_id, None)
        thread._writer.wait_for(batch_id)
    assert (thread._writer.merges, thread._writer.every_size) == ([[1], [2], [3], [4], [5]],
                                                                  [True, False, False, True, False])


def test_once_the_interval_is_past_and_no_batch_comes_the_coarser_sizes_are_merged(thread, monkeypatch):
    merge_two_at_the_finest_only(thread, monkeypatch)
    monkeypatch.setattr(merge_thread, "COARSE_INTERVAL_S", 0.0)
    monkeypatch.setattr(merge_thread, "QUIET_S", 0.0)
    with thread._changed:  # the thread waits for the interval it read: as if it had run out
        thread._changed.notify_all()
    assert thread._writer.wait_for(3) == [[1], [2], []] and thread._writer.every_size[-1]


def test_close_merges_the_coarser_sizes_of_what_was_merged_at_the_finest_only(thread, monkeypatch):
    merge_two_at_the_finest_only(thread, monkeypatch)
    thread.close(30)
    assert thread._writer.merges == [[1], [2], []] and thread._writer.every_size == [True, False, True]
