"""The merge child's rounds: a live query's quick batches merged together within the interval, a backlog's
as they come, and at once on FLUSH; and how a merge child ends with its query or its process."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from aggregator.merge_child import BATCH_GAP_S, FLUSH, MERGE_INTERVAL_S, _submitted
from aggregator.query import _SinkCloser

FAR = 3_600.0  # an interval no test waits out: returning at all means it was not waited for


def submitted_in_thread(conn, last_merge: float, last_arrival: float | None) -> tuple:
    out: list = []
    worker = threading.Thread(target=lambda: out.append(_submitted(conn, last_merge, last_arrival)),
                              daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "waited for the merge interval"
    return out[0]


def pipe_with(*messages):
    parent, child = multiprocessing.Pipe()
    for message in messages:
        parent.send(message)
    return parent, child


def test_quick_batches_are_merged_together_until_the_interval_after_the_last_merge():
    parent, child = pipe_with(3, 4)
    now = time.monotonic()
    threading.Timer(0.3, lambda: parent.send(5)).start()
    ids, ended, last_arrival = _submitted(child, now - MERGE_INTERVAL_S + 1.0, now)
    assert (ids, ended) == ([3, 4, 5], False)
    assert last_arrival >= now + 0.3  # when 5 came


def test_a_batch_after_a_long_gap_is_merged_at_once_with_those_already_waiting():
    _, child = pipe_with(3, 4)
    now = time.monotonic()
    ids, ended, _ = submitted_in_thread(child, now + FAR, now - BATCH_GAP_S - 1.0)
    assert (ids, ended) == ([3, 4], False)


def test_the_first_batch_is_merged_at_once():
    _, child = pipe_with(1)
    assert submitted_in_thread(child, time.monotonic() + FAR, None)[:2] == ([1], False)


def test_a_flush_ends_the_wait_for_the_interval():
    parent, child = pipe_with(3, 4, FLUSH, 5)
    now = time.monotonic()
    assert submitted_in_thread(child, now + FAR, now)[:2] == ([3, 4], False)
    parent.send(FLUSH)
    assert submitted_in_thread(child, now + FAR, time.monotonic())[:2] == ([5], False)


def test_a_flush_with_nothing_submitted_is_not_a_merge():
    _, child = pipe_with(FLUSH, FLUSH, 7)
    assert submitted_in_thread(child, time.monotonic(), None)[:2] == ([7], False)


def test_the_parent_closing_its_end_ends_the_child_after_what_it_handed_over():
    parent, child = pipe_with(9)
    parent.close()
    assert submitted_in_thread(child, time.monotonic() + FAR, time.monotonic())[:2] == ([9], True)


def test_a_writer_nobody_closed_does_not_keep_its_process_from_exiting(redis_url, tmp_path):
    """The child ignores stop signals and ends when its pipe closes; multiprocessing joins its children
    at exit, so a sink left open (a stopped query whose sink the listener never closed) hung the process."""
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(f"""
        from aggregator.merge_child import BackgroundWindowWriter

        if __name__ == "__main__":  # spawn imports the main module again in the child
            writer = BackgroundWindowWriter({redis_url!r}, "exit-probe:1", None)
            writer.wait_idle()  # the child runs and answered
            kept = [writer]  # never closed
    """))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    began = time.monotonic()
    subprocess.run([sys.executable, str(probe)], env=env, check=True, timeout=60)
    assert time.monotonic() - began < 30


def test_a_query_run_ends_only_its_own_sink():
    """A query restarted from its checkpoint keeps its id; the old run's end, heard after the new run
    started, closes the old run's sink and leaves the new one's merge child running."""
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
