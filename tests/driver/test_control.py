"""The srm-control record format and how records make the lists (no broker needed)."""

from __future__ import annotations

import pytest

from driver.control_lists import ControlState
from driver.control_record import ControlChange, ControlEntry, ControlFormatError, decode_change


def entry(name: str = "orders", kind: str = "topics", list_name: str = "allow") -> ControlEntry:
    return ControlEntry("east", "west", kind, list_name, name)


def test_key_is_a_canonical_json_array():
    assert entry().encode_key() == b'[1,"east","west","topics","allow","orders"]'


def test_non_ascii_entries_are_written_as_utf8_not_escaped():
    key = entry("zürich-.*").encode_key()
    assert key == '[1,"east","west","topics","allow","zürich-.*"]'.encode()
    assert ControlEntry.decode_key(key).name == "zürich-.*"


def test_present_entry_round_trips_with_its_timestamp():
    change = ControlChange(entry("billing", "groups", "deny"), present=True, ts_ms=1_700_000_000_000)
    value = change.encode_value()
    assert value == b'{"v":1,"ts":1700000000000}'
    assert decode_change(change.entry.encode_key(), value) == change


def test_tombstone_takes_the_entry_off_its_list():
    change = ControlChange(entry(), present=False)
    assert change.encode_value() is None
    assert decode_change(entry().encode_key(), None) == ControlChange(entry(), present=False)


def test_later_value_versions_still_mean_present():
    change = decode_change(entry().encode_key(), b'{"v":2,"ts":5,"by":"ops"}')
    assert change.present and change.ts_ms == 5


@pytest.mark.parametrize("key, problem", [
    (None, "key is missing"),
    (b"\xff\xfe", "not UTF-8 JSON"),
    (b"orders", "not UTF-8 JSON"),
    (b'{"source":"east"}', "key is not [1,source,target,kind,list,entry]"),
    (b'[2,"east","west","topics","allow","orders"]', "key is not [1,"),
    (b'[1,"east","west","topics","allow"]', "key is not [1,"),
    (b'[1,"east","west","topics","allow",7]', "key is not [1,"),
    (b'[1, "east", "west", "topics", "allow", "orders"]', "canonical form"),
    (b'[1,"east","west","tables","allow","orders"]', "kind 'tables'"),
    (b'[1,"east","west","topics","maybe","orders"]', "list 'maybe'"),
    (b'[1,"east","west","topics","allow",""]', "entry ''"),
    (b'[1,"east","west","topics","allow"," orders"]', "entry ' orders'"),
])
def test_bad_keys_are_rejected_naming_the_problem(key, problem):
    with pytest.raises(ControlFormatError, match=problem.replace("[", r"\[")):
        decode_change(key, b'{"v":1,"ts":1}')


@pytest.mark.parametrize("value", [b"yes", b"[1]", b'{"ts":1}', b'{"v":0,"ts":1}', b'{"v":true}', b""])
def test_bad_values_are_rejected(value):
    with pytest.raises(ControlFormatError, match="value"):
        decode_change(entry().encode_key(), value)


def test_entries_must_name_something():
    with pytest.raises(ControlFormatError, match="entry"):
        ControlEntry("east", "west", "topics", "allow", "  ")


def test_state_applies_changes_and_reports_only_real_ones():
    state = ControlState()
    assert state.apply(ControlChange(entry("a"), True))
    assert not state.apply(ControlChange(entry("a"), True))  # already there
    assert state.apply(ControlChange(entry("b"), True))
    assert state.apply(ControlChange(entry("c", list_name="deny"), True))
    assert state.apply(ControlChange(entry("a"), False))
    assert not state.apply(ControlChange(entry("zzz"), False))  # never there
    assert state.lists("east", "west", "topics") == (frozenset({"b"}), frozenset({"c"}))


def test_lists_are_per_replication_and_per_kind():
    state = ControlState()
    state.apply(ControlChange(entry("orders"), True))
    state.apply(ControlChange(entry("billing", kind="groups"), True))
    state.apply(ControlChange(ControlEntry("north", "west", "topics", "allow", "other"), True))
    assert state.lists("east", "west", "topics") == (frozenset({"orders"}), frozenset())
    assert state.lists("east", "west", "groups") == (frozenset({"billing"}), frozenset())
    assert state.lists("north", "west", "topics") == (frozenset({"other"}), frozenset())
    assert state.lists("west", "east", "topics") == (frozenset(), frozenset())
