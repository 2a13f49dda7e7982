"""The worker census runs beside the copy loop: a count that hangs or fails never blocks the loop, and
the last count is kept. (Replacing a client that got no answer is GroupAdmin's: tests/clients.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from clients import kafka_clients
from clients.kafka_clients import ClusterUnavailable, GroupAdmin, GroupMembership
from driver.worker_census import WorkerCensus
from tests.sample_properties import parse


def settle(census: WorkerCensus, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while census._running and time.monotonic() < deadline:  # the test waits for its thread
        time.sleep(0.01)


def test_a_hanging_count_does_not_block_and_the_last_answer_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: Iterator[GroupMembership | str] = iter([GroupMembership(2, 1), "timeout", "refused",
                                                    GroupMembership(3, 2)])
    release = threading.Event()

    groups = GroupAdmin(parse(), "east")

    def membership(asked: GroupAdmin, group: str) -> GroupMembership:
        assert (asked, group) == (groups, "srm-driver.east-west")
        answer = next(answers)
        if answer == "timeout":
            release.wait(5)
            raise ClusterUnavailable("no answer to an admin request within 30 s")
        if answer == "refused":
            error = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)
            raise ClusterUnavailable("cannot describe group") from KafkaException(error)
        assert isinstance(answer, GroupMembership)
        return answer

    monkeypatch.setattr(kafka_clients, "group_membership", membership)
    census = WorkerCensus("east->west", "srm-driver.east-west", groups)
    assert census.latest is None
    census.request()
    settle(census)
    assert census.latest == GroupMembership(2, 1)

    census.request()  # hangs on its own thread: returning at all while it hangs shows the loop goes on
    census.request()  # one at a time: no second request while it hangs
    assert census.latest == GroupMembership(2, 1)
    release.set()
    settle(census)
    assert census.latest == GroupMembership(2, 1), "the last count is kept while counting fails"

    census.request()  # refused
    settle(census)
    census.request()
    settle(census)
    assert census.latest == GroupMembership(3, 2)
