"""The worker census runs beside the copy loop: a count that hangs or fails never blocks the loop, the
last count is kept, and a client that got no answer is replaced."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from clients import kafka_clients
from clients.kafka_clients import ClusterUnavailable, GroupMembership
from driver.worker_census import WorkerCensus


def settle(census: WorkerCensus, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while census._running and time.monotonic() < deadline:  # the test waits for its thread
        time.sleep(0.01)


def test_a_hanging_count_does_not_block_and_the_last_answer_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    clients: list[object] = []
    answers: Iterator[GroupMembership | str] = iter([GroupMembership(2, 1), "timeout", "refused",
                                                    GroupMembership(3, 2)])
    release = threading.Event()

    def membership(client: object, alias: str, group: str) -> GroupMembership:
        assert (alias, group) == ("east", "srm-driver.east-west")
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
    def new_client() -> AdminClient:  # a token: the patched group_membership never uses it
        clients.append(object())
        return cast(AdminClient, clients[-1])

    census = WorkerCensus("east->west", "east", "srm-driver.east-west", new_client)
    assert census.latest is None
    census.request()
    settle(census)
    assert census.latest == GroupMembership(2, 1)

    began = time.monotonic()
    census.request()  # hangs on its own thread
    census.request()  # one at a time: no second request while it hangs
    assert time.monotonic() - began < 0.5
    assert census.latest == GroupMembership(2, 1)
    release.set()
    settle(census)
    assert census.latest == GroupMembership(2, 1), "the last count is kept while counting fails"

    census.request()  # refused: the client answered, so it is kept
    settle(census)
    census.request()
    settle(census)
    assert census.latest == GroupMembership(3, 2)
    # One client for the first count, a new one after the timeout, kept after the refusal.
    assert len(clients) == 2
