"""The discovery index entries a batch's subjects make (batch_plan.BatchPlan._add_index): pure, no Redis."""

from __future__ import annotations

import pyarrow as pa

from aggregator.batch_plan import BatchPlan
from contract import redis_layout as layout

ALL, WHOLE = layout.ALL_TOPICS, layout.WHOLE_TOPIC


def index_of(rows: list[tuple]) -> BatchPlan:
    columns = ["target", "source", "topic", "partition", "group", "upstream_topic"]
    schema = pa.schema([(c, pa.int32() if c == "partition" else pa.string()) for c in columns])
    table = pa.table(dict(zip(columns, map(list, zip(*rows, strict=True)), strict=True)), schema=schema)
    plan = BatchPlan()
    plan._add_index(table)
    return plan


def test_each_subject_is_named_by_its_target_source_topic_partitions_and_groups():
    plan = index_of([
        ("west", "east", "east.a", 0, "", "a"), ("west", "east", "east.a", 1, None, "a"),
        ("west", "east", "east.a", WHOLE, "", "a"),  # the whole topic: no partition entry
        ("west", "east", ALL, WHOLE, "", None),  # the replication: no topic entry
        ("west", "east", "east.b", 2, "billing", "b"), ("west", "south", "south.c", 0, "", ""),  # no upstream
        ("north", "east", "east.a", 0, "", "a"),
    ])
    assert plan.index_sets == {
        layout.targets_key(): {"west", "north"},
        layout.sources_key("west"): {"east", "south"}, layout.sources_key("north"): {"east"},
        layout.groups_key("west", "east"): {"billing"},
        layout.partitions_key("west", "east", "east.a"): {"0", "1"},
        layout.partitions_key("west", "east", "east.b"): {"2"},
        layout.partitions_key("west", "south", "south.c"): {"0"},
        layout.partitions_key("north", "east", "east.a"): {"0"},
    }
    assert plan.index_hashes == {layout.topics_key("west", "east"): {"east.a": "a", "east.b": "b"},
                                 layout.topics_key("north", "east"): {"east.a": "a"}}


def test_of_two_upstream_names_for_a_topic_the_last_subjects_wins():
    plan = index_of([("w", "e", "e.a", 0, "", "x"), ("w", "e", "e.a", 1, "", "y"),
                     ("w", "e", "e.a", 0, "", "x"), ("w", "e", "e.a", 2, "", "x")])
    assert plan.index_hashes == {layout.topics_key("w", "e"): {"e.a": "x"}}
