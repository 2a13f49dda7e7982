"""How a target's refusal to create remote topics reads, and how often it is logged (pure logic; the
live check is test_failed_status_when_target_refuses_remote_topic in test_raw_metrics_integration.py)."""

from __future__ import annotations

import logging

import pytest

from clients.client_faults import ClusterUnavailable, RequestRefused
from clients.kafka_clients import authorization_refusal
from driver.topic_sync import TopicRefusals


def test_refusal_names_cluster_topics_code_and_missing_permission() -> None:
    refused = authorization_refusal("west", "create topic", ["east.orders"], "TOPIC_AUTHORIZATION_FAILED",
                       "CREATE on the topic (or the cluster)")
    assert isinstance(refused, ClusterUnavailable)  # callers that do not know refusals still stop
    assert str(refused) == ("west: not authorized to create topic 'east.orders' "
                            "(TOPIC_AUTHORIZATION_FAILED): the client's principal needs CREATE on the "
                            "topic (or the cluster)")
    assert refused.alias == "west" and refused.resources == ("east.orders",)


def test_many_refused_topics_are_counted_not_listed() -> None:
    names = [f"east.t{i}" for i in range(10)]
    refused = authorization_refusal("west", "create topic", names, "TOPIC_AUTHORIZATION_FAILED", "CREATE")
    assert "'east.t0', 'east.t1', 'east.t2' and 7 more" in str(refused)
    assert set(refused.resources) == set(names)  # every one is left out, not only the named ones


def test_joined_refusals_keep_every_resource() -> None:
    create = RequestRefused("west", "west: not authorized to create topic 'east.a'", ["east.a"])
    grow = RequestRefused("west", "west: not authorized to add partitions to 'east.b'", ["east.b"])
    assert RequestRefused.joined([create]) is create
    both = RequestRefused.joined([create, grow])
    assert both.resources == ("east.a", "east.b")
    assert str(both) == f"{create}; {grow}"


def test_refusals_log_once_per_change_and_flag_each_change(caplog: pytest.LogCaptureFixture) -> None:
    refusals = TopicRefusals("east->west")
    refused = RequestRefused("west", "west: not authorized to create topic 'east.a'", ["east.a"])
    caplog.set_level(logging.INFO, logger="driver.topic_sync")
    assert not refusals.take_change()
    for _ in range(5):  # one refresh every 10 s for as long as nobody grants the ACL
        refusals.note(refused, 10.0)
    assert refusals.reason == str(refused) and refusals.take_change() and not refusals.take_change()
    refusals.note(None, 10.0)
    assert refusals.reason is None and refusals.take_change()
    refusals.note(None, 10.0)
    assert not refusals.take_change()
    # driver.topic_sync's lines only: a thread of an earlier test in this process may log meanwhile.
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "driver.topic_sync"]
    assert lines == [
        ("WARNING", "east->west: west: not authorized to create topic 'east.a'; the other topics are "
                    "copied, the refused ones tried again every 10 s"),
        ("INFO", "east->west: the target now has every remote topic it needs")]
