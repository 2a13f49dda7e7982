"""Topic and group filters (MM2 defaults, full match) and the eligibility rule with srm-control lists."""

from __future__ import annotations

import logging
import time

import pytest

from contract.config import ConfigError, parse_config
from contract.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from driver.topic_filter import (
    FoundAtStart,
    GroupFilter,
    TopicFilter,
    group_filter_for,
    should_replicate_group,
    should_replicate_topic,
    topic_filter_for,
)

POLICY = DefaultReplicationPolicy()
DEFAULT_TOPICS = TopicFilter()


@pytest.mark.parametrize("topic", ["orders", "A.orders", "heartbeats", "my-topic_1"])
def test_default_topic_filter_accepts_regular_topics(topic):
    assert DEFAULT_TOPICS.should_replicate_topic(topic)


@pytest.mark.parametrize(
    "topic",
    ["mm2-offsets.A.internal", "connect-offsets-internal", "orders.replica", "__consumer_offsets", "__x"],
)
def test_default_topic_filter_excludes_mm2_defaults(topic):
    assert not DEFAULT_TOPICS.should_replicate_topic(topic)


def test_patterns_must_match_the_whole_name():
    topic_filter = TopicFilter(["ord"], [])
    assert not topic_filter.should_replicate_topic("orders")
    assert not topic_filter.should_replicate_topic("word")
    assert TopicFilter(["ord.*"], []).should_replicate_topic("orders")


def test_any_pattern_of_the_list_may_match():
    topic_filter = TopicFilter(["orders", "pay.*"], [])
    assert topic_filter.should_replicate_topic("orders")
    assert topic_filter.should_replicate_topic("payments")
    assert not topic_filter.should_replicate_topic("users")


def test_patterns_with_alternation_still_match_whole_names():
    topic_filter = TopicFilter(["a|ab"], [])
    assert topic_filter.should_replicate_topic("ab")
    assert not topic_filter.should_replicate_topic("abc")


def test_empty_include_list_matches_nothing():
    assert not TopicFilter([], []).should_replicate_topic("orders")
    assert not GroupFilter([], []).should_replicate_group("app")


def test_exclude_wins_over_include():
    topic_filter = TopicFilter(["orders.*"], ["orders-private"])
    assert topic_filter.should_replicate_topic("orders-public")
    assert not topic_filter.should_replicate_topic("orders-private")


def test_empty_exclude_list_excludes_nothing():
    assert TopicFilter([".*"], []).should_replicate_topic("__consumer_offsets")


def test_bad_regex_names_the_pattern_and_setting():
    with pytest.raises(ValueError, match=r"topics\.exclude: invalid regular expression 'bad\('"):
        TopicFilter([".*"], ["ok", "bad("])
    with pytest.raises(ValueError, match=r"groups: invalid regular expression '\[x'"):
        GroupFilter(["[x"])


@pytest.mark.parametrize("group", ["app", "billing-service", "connect", "console-consumer"])
def test_default_group_filter_accepts_application_groups(group):
    assert GroupFilter().should_replicate_group(group)


@pytest.mark.parametrize("group", ["console-consumer-4711", "connect-mm2", "__internal"])
def test_default_group_filter_excludes_mm2_defaults(group):
    assert not GroupFilter().should_replicate_group(group)


def test_filter_reprs_list_the_patterns():
    assert repr(TopicFilter(["a"], ["b"])) == "TopicFilter(include=['a'], exclude=['b'])"
    assert repr(GroupFilter(["a"], [])) == "GroupFilter(include=['a'], exclude=[])"


def eligible(topic, topic_filter=DEFAULT_TOPICS, policy=POLICY, target="B", **kwargs):
    return should_replicate_topic(topic, topic_filter, policy, target, **kwargs)


def test_eligible_topics_follow_the_filter():
    assert eligible("orders")
    assert not eligible("orders", TopicFilter(["payments"], []))


def test_heartbeats_bypass_the_filter():
    narrow = TopicFilter(["payments"], ["heartbeats"])
    assert eligible("heartbeats", narrow)
    assert eligible("C.heartbeats", narrow)


def test_heartbeats_replication_can_be_disabled():
    narrow = TopicFilter(["payments"], [])
    assert not eligible("heartbeats", narrow, heartbeats_replication=False)
    assert eligible("heartbeats", DEFAULT_TOPICS, heartbeats_replication=False)


def test_internal_topics_are_never_eligible():
    everything = TopicFilter([".*"], [])
    for topic in ["__consumer_offsets", "A.checkpoints.internal", "mm2-offsets.A.internal", ".x"]:
        assert not eligible(topic, everything)
        assert not eligible(topic, everything, allow={topic})


def test_cycles_are_never_eligible():
    assert not eligible("B.orders", target="B")
    assert not eligible("C.B.orders", target="B", allow={"C.B.orders"})
    assert not eligible("B.heartbeats", target="B")
    assert eligible("C.orders", target="B")


def test_allow_list_adds_topics_on_top_of_the_filter():
    narrow = TopicFilter(["payments"], ["secret.*"])
    assert eligible("orders", narrow, allow={"orders"})
    assert eligible("secret-orders", narrow, allow={"secret-orders"})
    assert not eligible("users", narrow, allow={"orders"})


def test_deny_list_wins_over_filter_allow_list_and_heartbeats():
    assert not eligible("orders", deny={"orders"})
    assert not eligible("orders", allow={"orders"}, deny={"orders"})
    assert not eligible("heartbeats", deny={"heartbeats"})
    assert eligible("payments", deny={"orders"})


def test_control_list_entries_may_be_regexes_matching_whole_names():
    narrow = TopicFilter([], [])
    assert eligible("orders-eu", narrow, allow={"orders-.*"})
    assert not eligible("orders", narrow, allow={"order"})
    assert not eligible("orders-eu", deny={"orders-.*"})
    assert eligible("my-orders-eu", deny={"orders-.*"})


def test_invalid_regex_in_a_control_list_matches_literally(caplog):
    caplog.set_level(logging.WARNING, logger="driver.topic_filter")
    assert not eligible("odd(", deny={"odd("})
    assert eligible("odd", deny={"odd(x"})
    assert eligible("odd(x", TopicFilter([], []), allow={"odd(x"})
    assert "srm-control entry: pattern 'odd(x' refused" in caplog.text
    assert "matching it literally" in caplog.text


def test_control_list_entries_run_in_linear_time():
    # Python's re takes minutes on this; entries come from a topic anyone with Produce rights writes.
    began = time.monotonic()
    assert eligible("a" * 30, deny={"(a+)+X"})  # not denied: the pattern does not match
    assert not eligible("a" * 30 + "Y", TopicFilter([], []), allow={"(a+)+X"})
    assert time.monotonic() - began < 1.0
    assert eligible("aa", TopicFilter([], []), allow={"(a)\\1"}) is False  # RE2 refuses: literal only


def test_identity_policy_eligibility_relies_on_the_configured_source():
    policy = IdentityReplicationPolicy("A")
    assert eligible("orders", policy=policy, target="B")
    assert not eligible("orders", policy=policy, target="A")


def test_group_eligibility_with_control_lists():
    default = GroupFilter()
    assert should_replicate_group("app", default)
    assert not should_replicate_group("app", default, deny={"app"})
    assert should_replicate_group("connect-legacy", default, allow={"connect-legacy"})
    assert not should_replicate_group("console-consumer-1", default, allow={"app"})
    assert not should_replicate_group("app", default, allow={"app"}, deny={"a.*"})


CONFIG = """\
clusters = A, B, C
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
C.bootstrap.servers = c:9092
topics = orders.*
A->B.topics = payments, users
groups.exclude = test-.*
A->B.groups = app-.*
"""


def test_filters_from_config_follow_the_hierarchy():
    config = parse_config(CONFIG, "srm.properties")
    a_to_b = topic_filter_for(config, "A", "B")
    assert a_to_b.should_replicate_topic("payments")
    assert not a_to_b.should_replicate_topic("orders-eu")
    c_to_b = topic_filter_for(config, "C", "B")
    assert c_to_b.should_replicate_topic("orders-eu")
    assert not c_to_b.should_replicate_topic("orders.replica")  # default topics.exclude still applies


def test_group_filters_from_config_follow_the_hierarchy():
    config = parse_config(CONFIG, "srm.properties")
    a_to_b = group_filter_for(config, "A", "B")
    assert a_to_b.should_replicate_group("app-1")
    assert not a_to_b.should_replicate_group("billing")
    assert not a_to_b.should_replicate_group("test-app-1")
    c_to_b = group_filter_for(config, "C", "B")
    assert c_to_b.should_replicate_group("billing")
    assert not c_to_b.should_replicate_group("test-1")
    assert c_to_b.should_replicate_group("connect-x")  # groups.exclude replaced the defaults


def test_empty_setting_in_config_matches_nothing():
    config = parse_config(CONFIG + "A->C.topics =\n", "srm.properties")
    assert not topic_filter_for(config, "A", "C").should_replicate_topic("orders")


def test_bad_regex_in_config_is_a_config_error_at_its_line():
    config = parse_config(CONFIG + "B->C.topics.exclude = ok, (unclosed\n", "srm.properties")
    with pytest.raises(ConfigError) as caught:
        topic_filter_for(config, "B", "C")
    message = str(caught.value)
    assert message.startswith("srm.properties:9: B->C.topics.exclude: ")
    assert "'(unclosed'" in message


def test_found_at_start_keeps_the_first_names_and_only_drops_later() -> None:
    frozen = FoundAtStart(refresh=False)
    assert frozen.keep(["a", "b"]) == ["a", "b"]
    assert frozen.keep(["b", "c"]) == ["b"]  # c is new: left out; a is gone: dropped
    assert frozen.keep(["a", "c"]) == ["a"]  # a came back: it was found at start
    assert FoundAtStart(refresh=True).keep(["x"]) == ["x"]
