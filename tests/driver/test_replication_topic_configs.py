"""Which topic configs travel to remote topics (MM2 DefaultConfigPropertyFilter rules) and how often the
source topics are looked at (no broker)."""

from __future__ import annotations

import math

import pytest

from clients.kafka_clients import TopicConfigEntry
from contract.config import ConfigError, parse_config
from driver.topic_sync import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    config_changes,
    creation_configs,
    refresh_interval_s,
)

EXCLUDED = frozenset(DEFAULT_CONFIG_PROPERTIES_EXCLUDE)

ENTRIES = [
    TopicConfigEntry("retention.ms", "1000", is_default=False),
    TopicConfigEntry("cleanup.policy", "delete", is_default=True),
    TopicConfigEntry("min.insync.replicas", "2", is_default=False),  # excluded by MM2's default list
    TopicConfigEntry("message.timestamp.type", "LogAppendTime", is_default=False),  # excluded too
    TopicConfigEntry("segment.bytes", "1024", is_default=False, read_only=True),
    TopicConfigEntry("sasl.secret", "x", is_default=False, sensitive=True),
    TopicConfigEntry("log.dirs", "/data", is_default=False, static_broker=True),
    TopicConfigEntry("compression.type", None, is_default=False),
]


def test_new_remote_topic_gets_explicit_replicable_settings_only() -> None:
    assert creation_configs(ENTRIES, EXCLUDED) == {"retention.ms": "1000"}


def test_sync_sets_explicit_values_and_deletes_defaults_so_the_target_default_applies() -> None:
    changes = config_changes(ENTRIES, EXCLUDED)
    assert changes.set_values == {"retention.ms": "1000"}
    assert changes.delete == {"cleanup.policy"}


def test_use_defaults_from_source_copies_default_values() -> None:
    changes = config_changes(ENTRIES, EXCLUDED, use_source_defaults=True)
    assert changes.set_values == {"retention.ms": "1000", "cleanup.policy": "delete"}
    assert changes.delete == frozenset()


def test_exclusion_list_is_configurable() -> None:
    changes = config_changes(ENTRIES, frozenset({"retention.ms"}))
    assert "retention.ms" not in changes.set_values
    assert changes.set_values["min.insync.replicas"] == "2"


BASE = "clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\nA->B.enabled = true\n"


@pytest.mark.parametrize(("lines", "expected"), [
    ("", 600.0),  # MM2's defaults: both every ten minutes
    ("refresh.topics.interval.seconds = 5\n", 5.0),
    ("A->B.sync.topic.configs.interval.seconds = 2\n", 2.0),  # configs due before new topics are
    ("refresh.topics.enabled = false\nsync.topic.configs.interval.seconds = 30\n", 30.0),
    ("refresh.topics.enabled = false\nsync.topic.configs.enabled = false\n", math.inf),
    ("sync.topic.configs.enabled = false\nrefresh.topics.interval.seconds = 7\n", 7.0),
])
def test_refresh_interval_is_the_sooner_of_topics_and_configs(lines: str, expected: float) -> None:
    assert refresh_interval_s(parse_config(BASE + lines), "A", "B") == expected


@pytest.mark.parametrize("line", ["sync.topic.configs.interval.seconds = 0",
                                  "A->B.refresh.topics.interval.seconds = -3"])
def test_non_positive_interval_is_a_config_error_naming_the_key(line: str) -> None:
    with pytest.raises(ConfigError, match=line.split(" = ")[0].replace(".", r"\.")):
        parse_config(BASE + line + "\n")  # refused when the file loads, before any replication starts
