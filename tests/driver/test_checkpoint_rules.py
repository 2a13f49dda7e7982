"""Checkpoint rules: renaming (incl. fail-back), monotonic checkpoints, group offset sync."""

from __future__ import annotations

import pytest

from driver.checkpoint_rules import (
    CheckpointDecider,
    CheckpointPosition,
    checkpoint_is_newer,
    downstream_topic_for,
    normalized_group_state,
    offsets_to_sync,
    original_topic,
)


class DottedPolicy:
    """Minimal stand-in for the default replication policy ('.' separator)."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}.{topic}"

    def topic_source(self, topic: str) -> str | None:
        source, separator, _ = topic.partition(".")
        return source if separator else None

    def upstream_topic(self, topic: str) -> str | None:
        _, separator, rest = topic.partition(".")
        return rest if separator else None


class SameNamePolicy:
    """Stand-in for an identity policy: topics keep their names."""

    def __init__(self, source_alias: str) -> None:
        self.source_alias = source_alias

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return topic

    def topic_source(self, topic: str) -> str | None:
        return self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        return topic


class LoopingPolicy(DottedPolicy):
    def upstream_topic(self, topic: str) -> str | None:
        return "b" if topic == "a" else "a"


class TestRenaming:
    @pytest.mark.parametrize(
        ("upstream_topic", "expected"),
        [
            ("t", "A.t"),  # plain replication A->B
            ("B.t", "t"),  # fail-back: came from B, goes home under its own name
            ("C.t", "A.C.t"),  # from a third cluster: one more hop
            ("B.C.t", "t"),  # MM2 strips every hop on fail-back (originalTopic)
        ],
    )
    def test_downstream_topic(self, upstream_topic: str, expected: str) -> None:
        assert downstream_topic_for(DottedPolicy(), "A", "B", upstream_topic) == expected

    def test_original_topic_strips_all_hops(self) -> None:
        assert original_topic(DottedPolicy(), "B.A.t") == "t"
        assert original_topic(DottedPolicy(), "t") == "t"

    def test_identity_policy_keeps_names(self) -> None:
        policy = SameNamePolicy("A")
        assert original_topic(policy, "orders") == "orders"
        assert downstream_topic_for(policy, "A", "B", "orders") == "orders"

    def test_policy_own_original_topic_is_used(self) -> None:
        class PinnedPolicy(DottedPolicy):
            def original_topic(self, topic: str) -> str:
                return "pinned"

        assert downstream_topic_for(PinnedPolicy(), "A", "B", "B.t") == "pinned"
        assert downstream_topic_for(PinnedPolicy(), "A", "B", "t") == "A.t"

    def test_looping_policy_is_reported(self) -> None:
        with pytest.raises(ValueError, match="loops"):
            original_topic(LoopingPolicy(), "a")


class TestCheckpointIsNewer:
    @pytest.mark.parametrize(
        ("previous", "candidate", "expected"),
        [
            (None, (10, 5), True),  # first checkpoint
            ((10, 5), (10, 5), False),  # repeat
            ((10, 5), (20, 6), True),  # downstream advanced
            ((10, 5), (20, 5), False),  # upstream moved, translation did not
            ((10, 5), (20, 4), False),  # translation went back: keep monotonic
            ((10, 5), (3, 2), True),  # group rewound upstream: follow it
            ((10, 5), (3, 9), True),
            (None, (10, -1), False),  # untranslatable
            ((10, 5), (3, -1), False),
        ],
    )
    def test_decision(
        self,
        previous: tuple[int, int] | None,
        candidate: tuple[int, int],
        expected: bool,
    ) -> None:
        last = CheckpointPosition(*previous) if previous else None
        assert checkpoint_is_newer(last, CheckpointPosition(*candidate)) is expected


class TestCheckpointDecider:
    def test_offer_remembers_only_emitted_checkpoints(self) -> None:
        decider = CheckpointDecider()

        assert decider.offer("g", "A.t", 0, 100, 90) is True
        assert decider.offer("g", "A.t", 0, 150, 90) is False
        assert decider.last("g", "A.t", 0) == CheckpointPosition(100, 90)
        assert decider.offer("g", "A.t", 0, 160, 95) is True
        assert decider.last("g", "A.t", 0) == CheckpointPosition(160, 95)

    def test_groups_and_partitions_are_independent(self) -> None:
        decider = CheckpointDecider()
        decider.offer("g", "A.t", 0, 100, 90)

        assert decider.offer("g", "A.t", 1, 1, 1) is True
        assert decider.offer("h", "A.t", 0, 1, 1) is True
        assert decider.checkpoints_of("g") == {
            ("A.t", 0): CheckpointPosition(100, 90),
            ("A.t", 1): CheckpointPosition(1, 1),
        }

    def test_restored_checkpoints_keep_monotonicity_across_restart(self) -> None:
        decider = CheckpointDecider()
        decider.restore("g", "A.t", 0, 100, 90)

        assert decider.offer("g", "A.t", 0, 100, 80) is False
        assert decider.offer("g", "A.t", 0, 100, 91) is True


class TestOffsetsToSync:
    translated = {("A.t", 0): 90, ("A.t", 1): 40, ("A.u", 0): 7}

    def test_absent_group_gets_every_checkpoint(self) -> None:
        assert offsets_to_sync(None, {}, self.translated) == self.translated

    @pytest.mark.parametrize("state", ["EMPTY", "Empty", "empty", "ConsumerGroupState.EMPTY", "DEAD", "Dead"])
    def test_inactive_group_only_moves_forward(self, state: str) -> None:
        current = {("A.t", 0): 95, ("A.t", 1): 10}

        assert offsets_to_sync(state, current, self.translated) == {("A.t", 1): 40, ("A.u", 0): 7}

    @pytest.mark.parametrize(
        "state",
        [
            "STABLE",
            "Stable",
            "PreparingRebalance",
            "COMPLETING_REBALANCE",
            "ASSIGNING",
            "RECONCILING",
            "UNKNOWN",
        ],
    )
    def test_active_or_unclear_group_is_never_touched(self, state: str) -> None:
        assert offsets_to_sync(state, {}, self.translated) == {}

    def test_equal_offset_is_not_rewritten(self) -> None:
        assert offsets_to_sync("EMPTY", {("A.u", 0): 7}, {("A.u", 0): 7}) == {}

    def test_reset_target_offset_is_synced(self) -> None:
        # Some clients store -1 for "no offset"; that is no position to protect.
        assert offsets_to_sync("EMPTY", {("A.u", 0): -1}, {("A.u", 0): 0}) == {("A.u", 0): 0}

    def test_untranslatable_offsets_are_skipped(self) -> None:
        assert offsets_to_sync(None, {}, {("A.u", 0): -1}) == {}

    def test_state_names_are_normalized(self) -> None:
        assert normalized_group_state(" Empty ") == "EMPTY"
        assert normalized_group_state("GroupState.DEAD") == "DEAD"
        assert normalized_group_state(None) is None
