"""A merge's Redis calls, laid out a part at a time and packed for the wire: the layout (pure), and the
packed bytes against redis-py's own packing and a real redis-server."""

from __future__ import annotations

import uuid
from typing import cast

import hiredis
import numpy as np
import pyarrow as pa
import pytest

from aggregator.redis_scripts import REPLACE_WINDOWS_LUA
from aggregator.stored_windows import SCHEMA, SeriesKeys, WindowUpdates, hash_tag, merge_part
from aggregator.window_calls import calls_by_part
from contract import redis_layout as layout
from tests.aggregator.streaming_input import database, snapshot

SHA = "0123456789abcdef0123456789abcdef01234567"


def redis_commands(updates: list[WindowUpdates], keys: SeriesKeys) -> list[list[str]]:
    """The commands of a merge in one part."""
    return [command for _, calls in calls_by_part(updates, keys) for command in calls.commands(SHA)]


def test_redis_calls_write_a_key_not_trimmed_by_hset_and_the_trimmed_through_the_script_by_topic():
    keys = SeriesKeys()
    orders = ("west", "east", "east.orders", 0, "")
    ids = keys.number([orders, ("west", "east", "east.clicks", 0, ""), orders[:3] + (1, "")])
    assert ids == [0, 1, 2] and keys.number([orders]) == [0]
    changed = pa.table({"series": pa.array([2, 0, 1], pa.int64()), "start": pa.array([0, 0, 10_000]),
                        "member": ["0:1:9:9:9:9:1", "0:2:2:1:1:1:5", "10000:1:1:1:1:1:10000"],
                        "replaces": [False, True, False]})
    commands = redis_commands([WindowUpdates("10s", changed, {2: (None, -5), 1: (-20_000, -7)}, {1: 10_000})],
                              keys)
    ttl = str(layout.key_ttl_ms("10s"))
    # A key not trimmed: one HSET of its windows (start, member).
    assert commands[0] == ["HSET", keys.keys[0][0], "0", "0:2:2:1:1:1:5"]
    # The keys trimmed: one script call per topic (hash tag). ARGV: the keys trimmed; per key its fields,
    # then each field and value (a window's start and member, the newest start when it moved); then per key
    # trimmed its place in KEYS, the trim's first grid start ("*": the hash's own fields), the retention
    # cut-off, the window's size and the lifetime to set.
    assert commands[1:] == [
        ["EVALSHA", SHA, "1", keys.keys[2][0], "1", "1", "0", "0:1:9:9:9:9:1", "1", "*", "-5", "10000", ttl],
        ["EVALSHA", SHA, "1", keys.keys[1][0], "1", "2", "10000", "10000:1:1:1:1:1:10000",
         layout.NEWEST_FIELD, "10000", "1", "-20000", "-7", "10000", ttl]]


def test_redis_calls_give_each_key_its_windows_in_order():
    keys = SeriesKeys()
    ids = keys.number([("west", "east", "east.orders", p, "") for p in range(3)])
    starts = [30_000, 0, 10_000, 0, 20_000]
    series = [ids[2], ids[0], ids[2], ids[1], ids[2]]
    changed = pa.table({"series": pa.array(series, pa.int64()), "start": pa.array(starts, pa.int64()),
                        "member": [f"m{s}-{t}" for s, t in zip(series, starts, strict=True)],
                        "replaces": pa.array([False] * 5)})
    commands = redis_commands([WindowUpdates("1m", changed, {}, {}),
                               WindowUpdates("1h", changed.slice(1, 1), {ids[0]: (None, 0)}, {})], keys)
    ttl_1h = str(layout.key_ttl_ms("1h"))
    assert commands == [
        ["HSET", keys.keys[0][1], "0", "m0-0"], ["HSET", keys.keys[1][1], "0", "m1-0"],
        ["HSET", keys.keys[2][1], "10000", "m2-10000", "20000", "m2-20000", "30000", "m2-30000"],
        ["EVALSHA", SHA, "1", keys.keys[0][2], "1", "1", "0", "m0-0", "1", "*", "0", "3600000", ttl_1h]]


def test_members_made_from_merged_values_are_written_as_given_ones():
    keys = SeriesKeys()
    ids = keys.number([("west", "east", "east.orders", p, "") for p in range(3)])
    # Two windows of one key (before 1970: starts below zero work too) and one of another, every metric of
    # each a row (the merged values a WindowUpdates makes members of), and a key's newest start moved.
    windows = ((ids[2], -20_000), (ids[2], -10_000), (ids[0], 0))
    values = pa.Table.from_pylist([
        {"series": s, "metric": m, "start": start, "n": 1.0, "sum": 2.5, "min": -1.0, "max": 3.0,
         "last": float(m), "last_ts": start + 5} for s, start in windows for m in (0, 3)], schema=SCHEMA)
    changed = pa.table({"series": pa.array([s for s, _ in windows], pa.int64()),
                        "start": pa.array([t for _, t in windows], pa.int64()),
                        "replaces": [True, False, True]})
    lazy = WindowUpdates("10s", changed, {}, {ids[2]: -10_000}, values, np.array([0, 2, 4, 6]))
    made = lazy.with_members()
    assert made["member"].to_pylist() == ["-20000;0:1:2.5:-1:3:0:-19995;3:1:2.5:-1:3:3:-19995",
                                          "-10000;0:1:2.5:-1:3:0:-9995;3:1:2.5:-1:3:3:-9995",
                                          "0;0:1:2.5:-1:3:0:5;3:1:2.5:-1:3:3:5"]
    given = WindowUpdates("10s", made, {}, {ids[2]: -10_000})
    assert redis_commands([lazy], keys) == redis_commands([given], keys) == [
        ["HSET", keys.keys[0][0], "0", made["member"][2].as_py()],
        ["HSET", keys.keys[2][0], "-20000", made["member"][0].as_py(), "-10000", made["member"][1].as_py(),
         layout.NEWEST_FIELD, "-10000"]]


def written_keys(command: list[str]) -> list[str]:
    return command[1:2] if command[0] == "HSET" else command[3:3 + int(command[2])]


def test_a_merge_cut_into_parts_splits_its_calls_by_topic_and_leaves_out_the_parts_done():
    keys = SeriesKeys()
    ids = keys.number([("west", "east", f"east.t{t}", p, "") for t in range(40) for p in range(2)])
    changed = pa.table({"series": pa.array(ids, pa.int64()), "start": pa.array([0] * len(ids), pa.int64()),
                        "member": [f"m{i}" for i in ids], "replaces": pa.array([False] * len(ids))})
    updates = [WindowUpdates("10s", changed, {ids[3]: (None, -5)}, {ids[5]: 0})]
    whole = redis_commands(updates, keys)
    parts = {part: calls.commands(SHA) for part, calls in calls_by_part(updates, keys, 8)}
    assert 1 < len(parts) <= 8 and list(parts) == sorted(parts)
    # The commands of one part in one process are those of the merge uncut, each topic's in its tag's part.
    assert sorted(command for commands in parts.values() for command in commands) == sorted(whole)
    for part, commands in parts.items():
        assert all(merge_part(hash_tag(name), 8) == part
                   for command in commands for name in written_keys(command))
    skipped = {part: calls.commands(SHA)
               for part, calls in calls_by_part(updates, keys, 8, skip=list(parts)[:2])}
    assert skipped == {p: c for p, c in parts.items() if p not in list(parts)[:2]}


def test_packed_calls_are_the_commands_redis_reads():
    keys = SeriesKeys()
    # Topics whose names are not ASCII: a bulk string's length is in bytes.
    ids = keys.number([("west", "east", f"east.tö{t}", p, "") for t in range(12) for p in range(3)])
    changed = pa.table({"series": pa.array(ids, pa.int64()), "start": pa.array([0] * len(ids), pa.int64()),
                        "member": [f"0;0:1:{i}:1:1:1:5;ü" for i in ids],
                        "replaces": pa.array([True] * len(ids))})
    updates = [WindowUpdates("10s", changed, {ids[4]: (None, -5), ids[30]: (-20_000, -7)}, {ids[7]: 10_000}),
               WindowUpdates("1h", changed.slice(3, 9), {}, {})]
    for _, calls in calls_by_part(updates, keys, 3):
        reader = hiredis.Reader(encoding="utf-8")
        reader.feed(b"".join(bytes(b) for b in calls.packed(SHA)))
        commands = []
        while (command := reader.gets()) is not False:
            commands.append(command)
        assert commands == calls.commands(SHA)
        assert len(commands) == len(calls)


def mixed_updates(target: str) -> tuple[SeriesKeys, list[WindowUpdates]]:
    """A merge of 36 subjects of 12 topics (names and members not ASCII, one member past redis-py's 6 kB
    buffer cut-off) at two sizes, with trims of both kinds (known grid, "*") and newest starts moved."""
    keys = SeriesKeys()
    ids = keys.number([(target, "east", f"east.tö{t}", p, "") for t in range(12) for p in range(3)])
    members = [f"0;0:1:{i}:1:1:1:5;ü" for i in ids]
    members[5] = "0;" + ";".join(f"{m}:1:{m}.25:1:1:1:5" for m in range(900))
    changed = pa.table({"series": pa.array(ids, pa.int64()), "start": pa.array([0] * len(ids), pa.int64()),
                        "member": members, "replaces": pa.array([i % 2 == 0 for i in ids])})
    return keys, [
        WindowUpdates("10s", changed, {ids[4]: (None, -5), ids[30]: (-20_000, -7)}, {ids[7]: 10_000}),
        WindowUpdates("1h", changed.slice(3, 9), {ids[6]: (-7_200_000, -1)}, {ids[3]: 0})]


@pytest.mark.integration
def test_packed_calls_are_the_bytes_redis_py_sends_and_leave_redis_as_the_script_alone_does(redis_url: str):
    target = f"packed{uuid.uuid4().hex[:8]}"
    keys, updates = mixed_updates(target)
    packed_db, calls_db, script_db = database(redis_url, 3), database(redis_url, 4), database(redis_url, 5)
    sha = cast(str, packed_db.script_load(REPLACE_WINDOWS_LUA))
    # Windows the keys already hold, some of them before the trims' cut-offs.
    for client in (packed_db, calls_db, script_db):
        for key in (k for named in keys.keys for k in named):
            client.hset(key, mapping={"-7200000": "old", "-40000": "old", "-20000": "old", "-10000": "old",
                                      "0": "old", "x": "old", layout.NEWEST_FIELD: "0"})
    connection = packed_db.connection_pool.make_connection()
    scripts = 0
    try:
        for _, calls in calls_by_part(updates, keys, 3):
            packed = b"".join(bytes(b) for b in calls.packed(sha))
            commands = calls.commands(sha)
            # The bytes redis-py would send for the same commands.
            assert packed == b"".join(bytes(chunk) for command in commands
                                      for chunk in connection.pack_command(*command))
            connection.send_packed_command([packed])
            answers = [connection.read_response() for _ in range(len(calls))]
            assert answers == [calls_db.execute_command(*command) for command in commands]
            for command in commands:
                if command[0] == "HSET":  # as every key was written before: the script, trimming nothing
                    fields = command[2:]
                    assert script_db.evalsha(sha, 1, command[1], "0", str(len(fields) // 2), *fields) == 1
                else:
                    assert script_db.execute_command(*command) == 1
                    scripts += 1
    finally:
        connection.disconnect()
    assert scripts == 3  # a call a topic with a key trimmed (topics 1, 2 and 10)
    by_packed, by_calls, by_script = (snapshot(c, match=f"*{target}*")
                                      for c in (packed_db, calls_db, script_db))
    assert by_packed == by_calls == by_script and len(by_packed) == 2 * 36 * len(layout.WINDOWS)
    # The calls did write and trim: a window replaced, the grid and "*" trims' fields gone.
    trimmed = dict(cast(dict, calls_db.hgetall(keys.keys[30][0])))
    assert b"-20000" not in trimmed and b"-10000" not in trimmed and trimmed[b"-40000"] == b"old"
    assert trimmed[b"0"] == "0;0:1:30:1:1:1:5;ü".encode()
    # "*": every field before the cut-off among the hash's own (one not a start too), the newest start kept.
    assert set(cast(dict, calls_db.hgetall(keys.keys[4][0]))) == {b"0", layout.NEWEST_FIELD.encode()}
