"""Replication policies (MM2 compatible), cycle detection and the project's topic names."""

from __future__ import annotations

import re

import pytest

from contract.replication_policy import (
    CONTROL_TOPIC,
    HEARTBEATS_TOPIC,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    configs_topic,
    is_cycle,
    metrics_topic,
    metrics_topic_pattern,
    policy_from_config,
    progress_topic,
    status_topic,
)

DEFAULT = DefaultReplicationPolicy()


def test_default_formats_remote_topics_with_the_source_prefix():
    assert DEFAULT.format_remote_topic("us-west", "topic1") == "us-west.topic1"
    assert DEFAULT.format_remote_topic("us-east", "us-west.topic1") == "us-east.us-west.topic1"


@pytest.mark.parametrize(
    ("topic", "source", "upstream", "original"),
    [
        ("orders", None, None, "orders"),
        ("A.orders", "A", "orders", "orders"),
        ("B.A.orders", "B", "A.orders", "orders"),
        ("C.B.A.orders", "C", "B.A.orders", "orders"),
    ],
)
def test_default_source_upstream_and_original(topic, source, upstream, original):
    assert DEFAULT.topic_source(topic) == source
    assert DEFAULT.upstream_topic(topic) == upstream
    assert DEFAULT.original_topic(topic) == original


@pytest.mark.parametrize(
    ("topic", "source", "upstream"),
    [
        # Java's split drops trailing empty strings: "a.." has a single part, hence no source.
        ("a..", None, None),
        ("...", None, None),
        ("a.b.", "a", "b."),
        ("a..b", "a", ".b"),
        # A leading separator gives an empty first part in Java, so an empty source.
        (".a", "", "a"),
        ("", None, None),
        ("plain", None, None),
    ],
)
def test_default_emulates_the_java_split_quirk(topic, source, upstream):
    assert DEFAULT.topic_source(topic) == source
    assert DEFAULT.upstream_topic(topic) == upstream


def test_custom_separator():
    policy = DefaultReplicationPolicy(separator="_")
    assert policy.format_remote_topic("A", "my.topic") == "A_my.topic"
    assert policy.topic_source("A_my.topic") == "A"
    assert policy.upstream_topic("B_A_t") == "A_t"
    assert policy.original_topic("B_A_my.topic") == "my.topic"
    assert policy.topic_source("A.my.topic") is None


def test_multi_character_separator_splits_left_to_right():
    policy = DefaultReplicationPolicy(separator="__")
    assert policy.topic_source("a___b") == "a"
    assert policy.upstream_topic("a___b") == "_b"
    assert policy.topic_source("a____") is None


def test_empty_separator_is_rejected():
    with pytest.raises(ValueError, match="separator"):
        DefaultReplicationPolicy(separator="")


def test_default_internal_topic_names():
    assert DEFAULT.heartbeats_topic() == "heartbeats"
    assert DEFAULT.checkpoints_topic("A") == "A.checkpoints.internal"
    assert DEFAULT.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"


def test_internal_topic_names_use_the_separator_kip_690():
    policy = DefaultReplicationPolicy(separator="_")
    assert policy.checkpoints_topic("A") == "A_checkpoints_internal"
    assert policy.offset_syncs_topic("B") == "mm2-offset-syncs_B_internal"
    assert policy.heartbeats_topic() == "heartbeats"
    assert policy.is_checkpoints_topic("A_checkpoints_internal")
    assert not policy.is_checkpoints_topic("A.checkpoints.internal")
    assert policy.is_mm2_internal_topic("mm2-offset-syncs_B_internal")


def test_internal_separator_can_be_disabled_kip_949():
    policy = DefaultReplicationPolicy(separator="_", internal_topic_separator_enabled=False)
    assert policy.checkpoints_topic("A") == "A.checkpoints.internal"
    assert policy.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert policy.is_checkpoints_topic("A.checkpoints.internal")
    assert policy.format_remote_topic("A", "t") == "A_t"


@pytest.mark.parametrize("topic", ["heartbeats", "A.heartbeats", "B.A.heartbeats"])
def test_heartbeats_topics_and_their_remote_copies(topic):
    assert DEFAULT.is_heartbeats_topic(topic)


@pytest.mark.parametrize("topic", ["heartbeats-v2", "A.myheartbeats", "orders", "heartbeats.A"])
def test_other_topics_are_not_heartbeats(topic):
    assert not DEFAULT.is_heartbeats_topic(topic)


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        "__transaction_state",
        ".hidden",
        "connect-offsets-internal",
        "A.checkpoints.internal",
        "mm2-offset-syncs.B.internal",
        "mm2-offsets.A.internal",
        "srm-metrics.A.internal",
        CONTROL_TOPIC,
    ],
)
def test_internal_topics(topic):
    assert DEFAULT.is_internal_topic(topic)


@pytest.mark.parametrize("topic", ["orders", "A.orders", "heartbeats", "internal", "A.internals"])
def test_regular_topics_are_not_internal(topic):
    assert not DEFAULT.is_internal_topic(topic)


def test_checkpoints_and_mm2_internal_recognition():
    assert DEFAULT.is_checkpoints_topic("A.checkpoints.internal")
    assert not DEFAULT.is_checkpoints_topic("A.checkpoints")
    assert DEFAULT.is_mm2_internal_topic("mm2-status.A.internal")
    assert not DEFAULT.is_mm2_internal_topic("connect-status-internal")


def test_identity_keeps_topic_names():
    policy = IdentityReplicationPolicy("A")
    assert policy.format_remote_topic("A", "orders") == "orders"
    assert policy.topic_source("orders") == "A"
    assert policy.upstream_topic("orders") == "orders"
    assert policy.original_topic("orders") == "orders"


def test_identity_still_prefixes_heartbeats():
    policy = IdentityReplicationPolicy("B")
    assert policy.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert policy.topic_source("A.heartbeats") == "A"
    assert policy.upstream_topic("B.A.heartbeats") == "A.heartbeats"
    assert policy.original_topic("B.A.heartbeats") == "heartbeats"
    assert policy.is_heartbeats_topic("A.heartbeats")


def test_identity_without_source_alias_sees_only_local_topics():
    policy = IdentityReplicationPolicy()
    assert policy.topic_source("orders") is None
    assert policy.topic_source("heartbeats") is None
    assert not is_cycle(policy, "orders", "B")


def test_identity_uses_the_default_internal_topic_names():
    policy = IdentityReplicationPolicy("A", separator="_")
    assert policy.checkpoints_topic("A") == "A_checkpoints_internal"
    assert policy.is_internal_topic("mm2-offset-syncs_B_internal")


def test_cycle_when_the_topic_came_from_the_target():
    assert is_cycle(DEFAULT, "B.orders", "B")
    assert not is_cycle(DEFAULT, "orders", "B")
    assert not is_cycle(DEFAULT, "A.orders", "B")


def test_bidirectional_replication_never_loops():
    on_b = DEFAULT.format_remote_topic("A", "orders")  # A -> B copies orders as A.orders
    assert is_cycle(DEFAULT, on_b, "A")  # B -> A must not send A.orders back
    on_a = DEFAULT.format_remote_topic("B", "payments")
    assert is_cycle(DEFAULT, on_a, "B")
    assert not is_cycle(DEFAULT, "payments", "A")


def test_multi_hop_cycles():
    assert is_cycle(DEFAULT, "C.B.A.orders", "A")
    assert is_cycle(DEFAULT, "C.B.A.orders", "B")
    assert not is_cycle(DEFAULT, "C.B.A.orders", "D")
    assert not is_cycle(DEFAULT, "B.A.orders", "C")


def test_cycle_with_custom_separator():
    policy = DefaultReplicationPolicy(separator="_")
    assert is_cycle(policy, "B_A_t", "A")
    assert not is_cycle(policy, "B.A.t", "A")


def test_identity_cycle_detection_stops_instead_of_looping():
    policy = IdentityReplicationPolicy("A")
    assert not is_cycle(policy, "orders", "B")
    assert is_cycle(policy, "orders", "A")
    assert is_cycle(policy, "B.A.heartbeats", "A")


def test_project_topic_names():
    assert metrics_topic("east") == "srm-metrics.east.internal"
    assert progress_topic("east") == "mm2-offsets.east.internal"
    assert configs_topic("east") == "mm2-configs.east.internal"
    assert status_topic("east") == "mm2-status.east.internal"
    assert CONTROL_TOPIC == "srm-control.internal"
    assert HEARTBEATS_TOPIC == "heartbeats"


def test_metrics_topic_pattern_matches_only_metrics_topics():
    pattern = re.compile(metrics_topic_pattern())
    assert pattern.fullmatch(metrics_topic("east"))
    assert pattern.fullmatch(metrics_topic("us-west-2"))
    assert not pattern.fullmatch("srm-metrics-east.internal")
    assert not pattern.fullmatch(progress_topic("east"))
    assert not pattern.fullmatch("srm-metrics..internal")


@pytest.mark.parametrize(
    "source", [metrics_topic, progress_topic, configs_topic, status_topic, DEFAULT.checkpoints_topic]
)
def test_project_topics_are_never_replicated_as_data(source):
    assert DEFAULT.is_internal_topic(source("A"))


@pytest.mark.parametrize(
    "class_name",
    [None, "", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy", "DefaultReplicationPolicy"],
)
def test_policy_from_config_default(class_name):
    policy = policy_from_config(class_name, "_", "A")
    assert type(policy) is DefaultReplicationPolicy
    assert policy.format_remote_topic("A", "t") == "A_t"


@pytest.mark.parametrize(
    "class_name",
    ["org.apache.kafka.connect.mirror.IdentityReplicationPolicy", " IdentityReplicationPolicy "],
)
def test_policy_from_config_identity(class_name):
    policy = policy_from_config(class_name, ".", "A")
    assert isinstance(policy, IdentityReplicationPolicy)
    assert policy.topic_source("orders") == "A"


def test_policy_from_config_internal_separator_switch():
    policy = policy_from_config(None, "_", None, internal_topic_separator_enabled=False)
    assert policy.checkpoints_topic("A") == "A.checkpoints.internal"


def test_policy_from_config_rejects_unknown_classes_by_name():
    with pytest.raises(ValueError, match="'com.example.MyPolicy'"):
        policy_from_config("com.example.MyPolicy", ".", "A")


def test_policy_reprs_name_their_settings():
    assert repr(DefaultReplicationPolicy("_")) == "DefaultReplicationPolicy(separator='_')"
    assert repr(IdentityReplicationPolicy("A")) == "IdentityReplicationPolicy(source_cluster_alias='A')"
