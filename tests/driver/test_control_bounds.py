"""What a writer of srm-control.internal can cost a driver: lists are bounded, and each list version's
entries are compiled and matched once, not once per topic name and refresh (no broker needed)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

import driver.topic_filter
from contract.replication_policy import DefaultReplicationPolicy
from driver.control_lists import ControlState
from driver.control_record import ControlChange, ControlEntry, ControlFormatError
from driver.topic_filter import TopicFilter, should_replicate_topic

POLICY = DefaultReplicationPolicy()
FORGED = 1500  # the hostile run's count of long entries


def add(state: ControlState, name: str, list_name: str = "deny", source: str = "east",
        target: str = "west") -> bool:
    return state.apply(ControlChange(ControlEntry(source, target, "topics", list_name, name), True))


def long_pattern(i: int) -> str:
    return f"never-{i:05d}-" + "(?:ab|cd)?" * 20 + "x"  # 230 characters, a pattern RE2 takes


def test_a_list_takes_a_bounded_number_of_entries():
    from driver.control_lists import MAX_LIST_ENTRIES

    state = ControlState()
    for i in range(MAX_LIST_ENTRIES):
        assert add(state, f"t{i}")
    with pytest.raises(ControlFormatError, match="full"):
        add(state, "one-more")
    assert add(state, "t0-other-list", list_name="allow")  # another list has its own room
    assert state.apply(ControlChange(ControlEntry("east", "west", "topics", "deny", "t0"), False))
    assert add(state, "one-more")  # a removal makes room
    allow, deny = state.lists("east", "west", "topics")
    assert len(deny) == MAX_LIST_ENTRIES and "one-more" in deny and "t0" not in deny


def test_only_lists_of_replications_into_this_target_are_kept():
    state = ControlState("west", ["east", "north"])
    assert add(state, "orders")
    assert add(state, "orders", source="north")
    with pytest.raises(ControlFormatError, match="target 'south'"):
        add(state, "orders", target="south")
    with pytest.raises(ControlFormatError, match="source 'mars'"):
        add(state, "orders", source="mars")


def test_each_entry_is_compiled_once_per_list_version(monkeypatch: pytest.MonkeyPatch):
    compiled: list[str] = []
    real = driver.topic_filter.compile_user_pattern

    def counting(pattern: str, *args: Any, **kwargs: Any):
        compiled.append(pattern)
        return real(pattern, *args, **kwargs)

    monkeypatch.setattr(driver.topic_filter, "compile_user_pattern", counting)
    state = ControlState()
    for i in range(FORGED):
        with contextlib.suppress(ControlFormatError):  # past the cap: refused
            add(state, long_pattern(i))
    names = [f"orders-{i}" for i in range(40)]

    def refresh() -> list[bool]:
        allow, deny = state.lists("east", "west", "topics")
        return [should_replicate_topic(name, TopicFilter(), POLICY, "west", allow=allow, deny=deny)
                for name in names]

    assert all(refresh())
    kept = len(state.lists("east", "west", "topics")[1])
    assert len(compiled) == kept  # every entry once, for 40 names
    assert kept < FORGED
    assert all(refresh()) and len(compiled) == kept  # the same version again: nothing compiled
    add(state, "orders-3", list_name="allow")  # the allow list changed, the deny list did not
    assert all(refresh()) and len(compiled) == kept
    state.apply(ControlChange(ControlEntry("east", "west", "topics", "deny", long_pattern(0)), False))
    add(state, "orders-[0-9]+")
    assert not any(refresh())
    assert len(compiled) == 2 * kept  # a new version of the deny list: compiled once more


def test_a_long_entry_is_a_name_never_a_pattern():
    from driver.topic_filter import MAX_PATTERN_CHARS

    pattern = "orders-" + "(?:x)?" * 60 + ".*"
    assert len(pattern) > MAX_PATTERN_CHARS
    state = ControlState()
    add(state, pattern)
    allow, deny = state.lists("east", "west", "topics")
    assert should_replicate_topic("orders-eu", TopicFilter(), POLICY, "west", allow=allow, deny=deny)
