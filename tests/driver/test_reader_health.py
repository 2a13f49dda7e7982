"""The registry of one replication's readers: guards kept across restarts, liveness, the report."""

from __future__ import annotations

import logging
import threading

import pytest

from clients.record_guard import RecordGuard
from contract.records.raw_metrics import ReaderHealth
from driver.reader_health import ReplicationReaders

LOG = logging.getLogger("test-reader-health")


def test_a_kinds_guard_is_made_once_so_its_count_is_a_total_over_restarts():
    readers = ReplicationReaders("east->west")
    first = readers.guard("offset_syncs", max_key_bytes=8, max_value_bytes=8, logger=LOG)
    first.reject("mm2-offset-syncs.west.internal[0]@3", "too large")
    again = readers.guard("offset_syncs", max_key_bytes=8, max_value_bytes=8, logger=LOG)  # a new attempt
    again.reject("mm2-offset-syncs.west.internal[0]@3", "too large")
    assert again is first and first.reader == "offset-syncs reader of east->west"
    readers.watch("offset_syncs", lambda: True)
    report = readers.report()
    assert report == {"offset_syncs": ReaderHealth(2, True, "mm2-offset-syncs.west.internal[0]@3: too large")}


def test_nothing_known_reports_nothing_and_a_failing_probe_reads_as_not_alive():
    readers = ReplicationReaders("east->west")
    assert readers.report() is None

    def broken() -> bool:
        raise RuntimeError("torn down")

    readers.watch("checkpoints", broken)
    assert readers.report() == {"checkpoints": ReaderHealth(0, False, None)}


class _Lists:
    def __init__(self) -> None:
        self.guard = RecordGuard("srm-control reader of west", max_key_bytes=8, max_value_bytes=8)
        self.failure: str | None = None
        self.thread_alive = True

    def is_alive(self) -> bool:
        return self.thread_alive


def test_the_control_lists_bring_their_own_guard_and_read_only_without_a_failure():
    readers, lists = ReplicationReaders("east->west"), _Lists()
    readers.adopt_control(lists)
    lists.guard.reject("srm-control.internal[0]@9", "bad key")
    assert readers.report()["control"] == ReaderHealth(1, True, "srm-control.internal[0]@9: bad key")
    lists.failure = "KafkaException: broker down"
    assert readers.report()["control"].alive is False
    readers.adopt_control(object())  # fixed lists in a test: nothing to report, nothing replaced
    assert readers.report()["control"].rejected == 1


def test_progress_reads_while_its_worker_runs_with_a_reader_open():
    readers, stop = ReplicationReaders("east->west"), threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.progress = None
    readers.progress_guard(worker)
    worker.start()
    try:
        assert readers.report()["progress"].alive is False  # between attempts
        worker.progress = object()
        assert readers.report()["progress"].alive is True
    finally:
        stop.set()
        worker.join(5)
    assert readers.report()["progress"].alive is False


def test_unknown_kinds_are_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown reader kind 'lineage'; known: progress, control"):
        ReplicationReaders("east->west").watch("lineage", lambda: True)
