"""GroupAdmin's rules: an admin request to a group coordinator that got no answer drops its client at once
(destroyed, not left for the garbage collector) and the next request makes a new one; a refusal keeps
the client; librdkafka is never the first to time such a request out (its issue 4605 aborts the process
then); and committed offsets are read by a consumer of the group, never by the admin API (its issue 5040).

The clients are fakes: the rule is pure bookkeeping. tests/driver/test_replication_outages.py runs it
against a real broker that goes away and comes back.
"""

from __future__ import annotations

import gc
import re
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from clients import kafka_clients
from clients.kafka_clients import GROUP_REQUEST_TIMEOUT_S, ClusterUnavailable, GroupAdmin
from tests.sample_properties import parse

GROUP = "orders-app"


class FakeAdmin:
    """Answers each consumer-group request with the next of `answers`: a value, a KafkaError, or
    "silence" (a future that never completes)."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers: list[Any] = answers
        self.timeouts: list[float] = []

    def poll(self, timeout: float) -> int:
        return 0

    def _answer(self, request_timeout: float) -> dict[str, Future]:
        self.timeouts.append(request_timeout)
        future: Future = Future()
        answer = self.answers.pop(0)
        if isinstance(answer, KafkaError):
            future.set_exception(KafkaException(answer))
        elif answer != "silence":
            future.set_result(answer)
        return {GROUP: future}

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Future]:
        return self._answer(request_timeout)

    def alter_consumer_group_offsets(self, request: list, request_timeout: float) -> dict[str, Future]:
        return self._answer(request_timeout)


class Made:
    """Every client GroupAdmin made (weakly held: a test sees whether it was destroyed), and what each
    next client answers."""

    def __init__(self) -> None:
        self.clients: list[weakref.ref] = []
        self.script: list[list[Any]] = []

    def admin(self, config: object, alias: str, overrides: object = None) -> FakeAdmin:
        client = FakeAdmin(self.script.pop(0))
        self.clients.append(weakref.ref(client))
        return client


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    made = Made()
    monkeypatch.setattr(kafka_clients, "admin", made.admin)
    monkeypatch.setattr(kafka_clients, "POLL_STEP_S", 0.01)
    gc.disable()  # a client must die by reference counting; the collector must not do it for the test
    try:
        yield made
    finally:
        gc.enable()


def group_admin() -> GroupAdmin:
    return GroupAdmin(parse(), "east", wait_s=0.05)


@pytest.mark.parametrize("silence", ["silence", KafkaError(KafkaError._TIMED_OUT),
                                     KafkaError(KafkaError._TRANSPORT)],
                         ids=["our deadline", "librdkafka timed out", "transport failure"])
def test_an_unanswered_request_destroys_the_client_and_the_next_one_gets_a_new_one(made: Made,
                                                                                  silence: Any) -> None:
    made.script.extend([["first answer", silence], ["after a new client"]])
    groups = group_admin()
    assert groups.describe(GROUP) == "first answer"
    expected = f"east: no answer to a request for a description of group {GROUP!r}"
    with pytest.raises(ClusterUnavailable, match=re.escape(expected)):
        groups.describe(GROUP)
    # Gone by reference counting, not left to the garbage collector: alive, librdkafka could abort later.
    assert made.clients[0]() is None, "the client that got no answer is still alive"
    assert groups.dropped == 1
    assert groups.alter(GROUP, []) == "after a new client"
    assert len(made.clients) == 2


def test_a_refusal_keeps_the_client(made: Made) -> None:
    made.script.append([KafkaError(KafkaError.GROUP_ID_NOT_FOUND), KafkaError(KafkaError.UNKNOWN_MEMBER_ID),
                        "altered"])
    groups = group_admin()
    with pytest.raises(KafkaException) as refused:
        groups.describe(GROUP)
    assert refused.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    with pytest.raises(KafkaException):
        groups.alter(GROUP, [])
    assert groups.alter(GROUP, []) == "altered"
    assert len(made.clients) == 1 and groups.dropped == 0


def test_librdkafka_waits_longer_than_we_do(made: Made) -> None:
    """Its timing out first is what aborts the process: it must never come before our deadline, nor
    before the client is dropped after it (librdkafka caps the timeout at an hour)."""
    made.script.append(["a", "b"])
    groups = GroupAdmin(parse(), "east")
    assert [groups.describe(GROUP), groups.alter(GROUP, [])] == ["a", "b"]
    client = made.clients[0]()
    assert client is not None
    assert client.timeouts == [GROUP_REQUEST_TIMEOUT_S] * 2
    assert groups.wait_s + 60 <= GROUP_REQUEST_TIMEOUT_S <= 3600


class FakeReader:
    """A consumer of one group that answers `committed` with `answer` (a KafkaError is raised)."""

    def __init__(self, group: str, answer: Any) -> None:
        self.group, self.answer, self.closed = group, answer, False

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        if isinstance(self.answer, KafkaError):
            raise KafkaException(self.answer)
        return [TopicPartition(tp.topic, tp.partition, self.answer) for tp in partitions]

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("answer", [42, KafkaError(KafkaError._TIMED_OUT),
                                    KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)],
                         ids=["offsets", "no answer", "refused"])
def test_committed_offsets_are_read_by_a_consumer_of_the_group_never_by_the_admin_api(
        made: Made, monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    readers: list[FakeReader] = []

    def consumer(config: object, alias: str, group_id: str, overrides: object = None) -> FakeReader:
        readers.append(FakeReader(group_id, answer))
        return readers[-1]

    monkeypatch.setattr(kafka_clients, "consumer", consumer)
    groups = group_admin()
    asked = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    if answer == 42:
        assert [(tp.topic, tp.partition, tp.offset) for tp in groups.committed(GROUP, asked)] == [
            ("orders", 0, 42), ("orders", 1, 42)]
    elif answer.code() == KafkaError._TIMED_OUT:
        with pytest.raises(ClusterUnavailable, match=re.escape(f"the offsets of group {GROUP!r}")):
            groups.committed(GROUP, asked)
    else:
        with pytest.raises(KafkaException):
            groups.committed(GROUP, asked)
    assert [(r.group, r.closed) for r in readers] == [(GROUP, True)]
    assert groups.committed(GROUP, []) == [] and len(readers) == 1
    assert made.clients == [], "no admin client asked for offsets"
