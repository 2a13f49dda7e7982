"""MM2's tasks.max: which task copies a source partition (pure logic, no broker)."""

from __future__ import annotations

from collections import Counter

from driver.replication_tasks import task_of, task_partitions


def test_adding_partitions_keeps_every_existing_partition_in_its_task() -> None:
    before = {(t, p): task_of(t, p, 4) for t in ("orders", "payments") for p in range(12)}
    after = {(t, p): task_of(t, p, 4) for t in ("orders", "payments") for p in range(40)}
    assert all(after[key] == task for key, task in before.items())


def test_a_topics_partitions_are_spread_evenly_over_the_tasks() -> None:
    counts = Counter(task_of("orders", p, 4) for p in range(12))
    assert sorted(counts) == [0, 1, 2, 3]
    assert set(counts.values()) == {3}


def test_task_partitions_splits_every_partition_into_exactly_one_task() -> None:
    topics = {"orders": 12, "payments": 5, "audit": 1}
    parts = [task_partitions(topics, [task], 4) for task in range(4)]
    assert sum(len(p) for p in parts) == 18
    assert set().union(*parts) == {(t, p) for t, n in topics.items() for p in range(n)}
    assert task_partitions(topics, range(4), 4) == set().union(*parts)


def test_one_task_copies_everything() -> None:
    assert {task_of(t, p, 1) for t in ("a", "b") for p in range(100)} == {0}
