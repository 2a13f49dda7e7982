"""The merge child's batching of submitted batches: merged together within the interval, at once on FLUSH."""

from __future__ import annotations

import multiprocessing
import threading
import time

from aggregator.merge_child import FLUSH, _submitted

FAR = 3_600.0  # an interval no test waits out: returning at all means it was not waited for


def submitted_in_thread(conn, not_before: float) -> list:
    out: list = []
    worker = threading.Thread(target=lambda: out.append(_submitted(conn, not_before)), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "waited for the merge interval"
    return out[0]


def test_batches_handed_over_within_the_interval_are_merged_together():
    parent, child = multiprocessing.Pipe()
    for batch_id in (3, 4, 5):
        parent.send(batch_id)
    assert _submitted(child, time.monotonic() + 0.2) == ([3, 4, 5], False)


def test_a_flush_ends_the_wait_for_the_interval():
    parent, child = multiprocessing.Pipe()
    for message in (3, 4, FLUSH, 5):
        parent.send(message)
    assert submitted_in_thread(child, time.monotonic() + FAR) == ([3, 4], False)
    parent.send(FLUSH)
    assert submitted_in_thread(child, time.monotonic() + FAR) == ([5], False)


def test_a_flush_with_nothing_submitted_is_not_a_merge():
    parent, child = multiprocessing.Pipe()
    for message in (FLUSH, FLUSH, 7):
        parent.send(message)
    assert _submitted(child, time.monotonic()) == ([7], False)


def test_the_parent_closing_its_end_ends_the_child_after_what_it_handed_over():
    parent, child = multiprocessing.Pipe()
    parent.send(9)
    parent.close()
    assert submitted_in_thread(child, time.monotonic() + FAR) == ([9], True)
