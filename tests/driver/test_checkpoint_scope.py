"""Checkpoint scope (settings, checkpointable and fail-back topics) and checkpoint metrics."""

from __future__ import annotations

import pytest

from contract.config import ConfigError, parse_config
from contract.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from driver.checkpoint_metrics import CheckpointStats
from driver.checkpoint_scope import (
    CheckpointSettings,
    checkpointable_topic,
    is_failback_topic,
)
from driver.topic_filter import TopicFilter

BASE = "clusters = A, B\nA.bootstrap.servers = a:9092\nB.bootstrap.servers = b:9092\nA->B.enabled = true\n"


class TestSettings:
    def test_mm2_defaults(self):
        settings = CheckpointSettings.of(parse_config(BASE), "A", "B")
        assert settings == CheckpointSettings(emit_enabled=True, emit_interval_s=60.0, sync_enabled=False,
                                              sync_interval_s=60.0, metrics_period_s=30.0,
                                              history_size=1024, spacing=101,
                                              reverse_spacing=101)

    def test_history_size_and_spacing_per_direction(self):
        config = parse_config(BASE + "offset-syncs.history.size = 0\nA->B.offset.lag.max = 9\n"
                                     "B->A.offset.lag.max = 4\n")
        settings = CheckpointSettings.of(config, "A", "B")
        assert (settings.history_size, settings.spacing, settings.reverse_spacing) == (0, 10, 5)
        assert settings.sync_store(True).recent("t", 0) == []

    def test_negative_history_size_is_a_config_error(self):
        with pytest.raises(ConfigError, match="offset-syncs.history.size"):
            CheckpointSettings.of(parse_config(BASE + "offset-syncs.history.size = -1\n"), "A", "B")

    def test_replication_level_wins(self):
        config = parse_config(BASE + "emit.checkpoints.interval.seconds = 10\n"
                                     "A->B.emit.checkpoints.interval.seconds = 2.5\n"
                                     "A->B.sync.group.offsets.enabled = true\n"
                                     "offset-syncs.topic.location = target\n")
        settings = CheckpointSettings.of(config, "A", "B")
        assert settings.emit_interval_s == 2.5
        assert settings.sync_enabled
        assert config.offset_syncs_location("A", "B") == ("B", "mm2-offset-syncs.A.internal")

    def test_offset_syncs_location_per_direction(self):
        # A -> B keeps MM2's default (on its source), B -> A writes its syncs on its target (A).
        config = parse_config(BASE + "B->A.enabled = true\nB->A.offset-syncs.topic.location = target\n")
        assert config.offset_syncs_location("A", "B") == ("A", "mm2-offset-syncs.B.internal")
        assert config.offset_syncs_location("B", "A") == ("A", "mm2-offset-syncs.B.internal")

    @pytest.mark.parametrize(("line", "key"), [
        ("emit.checkpoints.interval.seconds = 0", "emit.checkpoints.interval.seconds"),
        ("A->B.sync.group.offsets.interval.seconds = -1", "A->B.sync.group.offsets.interval.seconds"),
        ("offset-syncs.topic.location = elsewhere", "offset-syncs.topic.location"),
    ])
    def test_bad_values_name_the_key(self, line, key):
        with pytest.raises(ConfigError) as error:  # intervals when the file loads, the rest here
            CheckpointSettings.of(parse_config(BASE + line + "\n", "srm.properties"), "A", "B")
        assert key in str(error.value) and "srm.properties" in str(error.value)


class TestTopics:
    policy = DefaultReplicationPolicy()

    @pytest.mark.parametrize(("topic", "expected"), [
        ("t", True),  # replicated A -> B as A.t
        ("B.t", True),  # fail-back: came from B, checkpointed as t on B
        ("C.t", True),  # from a third cluster: replicated as A.C.t
        ("B.C.t", False),  # multi-hop from B: the reverse syncs do not describe C.t
        ("mm2-offset-syncs.B.internal", False),
        ("__consumer_offsets", False),
        ("excluded", False),
    ])
    def test_checkpointable(self, topic, expected):
        topic_filter = TopicFilter(include=[".*"], exclude=["excluded", r".*\.internal", "__.*"])
        assert checkpointable_topic(topic, topic_filter, self.policy, "A", "B") is expected

    def test_failback_respects_the_topic_filter(self):
        assert not checkpointable_topic("B.t", TopicFilter(include=["t"]), self.policy, "A", "B")

    def test_srm_control_topic_lists_apply_to_both_kinds(self):
        only_t = TopicFilter(include=["t"])
        assert checkpointable_topic("B.u", only_t, self.policy, "A", "B", allow=frozenset({"B.u"}))
        assert checkpointable_topic("u", only_t, self.policy, "A", "B", allow=frozenset({"u"}))
        assert not checkpointable_topic("t", only_t, self.policy, "A", "B", deny=frozenset({"t"}))
        assert not checkpointable_topic("B.t", TopicFilter(), self.policy, "A", "B", deny=frozenset({"B.*"}))

    def test_failback_needs_the_target_as_source(self):
        assert is_failback_topic(self.policy, "A", "B", "B.t")
        assert not is_failback_topic(self.policy, "A", "B", "C.t")
        assert not is_failback_topic(self.policy, "A", "B", "t")

    def test_identity_policy_has_no_failback_renaming(self):
        policy = IdentityReplicationPolicy("A")
        assert not is_failback_topic(policy, "A", "B", "t")


class TestCheckpointStats:
    def test_latency_runs_from_first_sight_of_the_offset_to_the_ack(self):
        stats = CheckpointStats("A", "B", now_ms=0)
        key = ("g", "t", 0)
        stats.observe(key, "A.t", 10, source_end_offset=50, listed_ms=1_000)
        stats.observe(key, "A.t", 10, source_end_offset=60, listed_ms=2_000)  # not translatable before
        stats.checkpointed(key, 10, 35, acked_ms=2_100)
        [record] = stats.drain(now_ms=5_000)
        assert record.checkpoint_latency_ms is not None
        assert (record.checkpoint_latency_ms.last, record.checkpoint_latency_ms.count) == (1_100.0, 1)
        assert record.group_upstream_offset == 10 and record.group_downstream_offset == 35
        assert record.group_lag == 50
        assert (record.topic, record.upstream_topic, record.period_ms) == ("A.t", "t", 5_000)

    def test_a_new_commit_restarts_the_clock_and_periods_reset_latency(self):
        stats = CheckpointStats("A", "B", now_ms=0)
        key = ("g", "t", 0)
        stats.observe(key, "A.t", 10, None, listed_ms=1_000)
        stats.observe(key, "A.t", 20, None, listed_ms=3_000)
        stats.checkpointed(key, 20, 45, acked_ms=3_050)
        [first] = stats.drain(now_ms=4_000)
        [second] = stats.drain(now_ms=5_000)
        assert first.checkpoint_latency_ms is not None and first.checkpoint_latency_ms.max == 50.0
        assert second.checkpoint_latency_ms is None and second.group_downstream_offset == 45
        assert second.group_lag is None  # no end offset known yet

    def test_stale_acknowledgement_records_no_latency(self):
        stats = CheckpointStats("A", "B", now_ms=0)
        key = ("g", "t", 0)
        stats.observe(key, "A.t", 20, None, listed_ms=1_000)
        stats.checkpointed(key, 10, 30, acked_ms=1_500)  # for an older commit
        [record] = stats.drain(now_ms=2_000)
        assert record.checkpoint_latency_ms is None

    def test_forgotten_partitions_are_not_reported(self):
        stats = CheckpointStats("A", "B", now_ms=0)
        stats.observe(("g", "t", 0), "A.t", 1, 5, listed_ms=1)
        stats.observe(("h", "t", 0), "A.t", 2, 5, listed_ms=1)
        stats.retain([("h", "t", 0)])
        assert [r.group for r in stats.drain(now_ms=10)] == ["h"]
