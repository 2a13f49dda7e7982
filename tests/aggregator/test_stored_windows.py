"""Stored windows kept by the sink: partials merged into absolute window values on Arrow, what is not
kept read from Redis first (pure: Redis replies are given as lists)."""

from __future__ import annotations

import pyarrow as pa

from aggregator.stored_windows import (
    SeriesKeys,
    StoredWindows,
    keep_ms,
    merge_part,
    size_partials,
)
from contract import redis_layout as layout

KEY = 0  # the subject's number
COUNT, LAG = layout.METRIC_INDEX["record_count"], layout.METRIC_INDEX["records_lag"]


def finest(*windows: tuple[int, float, float, float, float, float, int], metric: int = COUNT) -> pa.Table:
    """Partial 10 s windows of one metric of one subject: (start, n, sum, min, max, last, last_ts)."""
    columns = list(zip(*windows, strict=True))
    names = ("start", "n", "sum", "min", "max", "last", "last_ts")
    table = {name: pa.array(values, pa.int64() if name in ("start", "last_ts") else pa.float64())
             for name, values in zip(names, columns, strict=True)}
    return pa.table({"series": pa.array([KEY] * len(windows), pa.int64()),
                     "metric": pa.array([metric] * len(windows), pa.int64()), **table})


def values(table: pa.Table) -> list[tuple]:
    rows = table.sort_by([("series", "ascending"), ("start", "ascending")]).to_pylist()
    return [(r["start"], r["n"], r["sum"], r["min"], r["max"], r["last"], r["last_ts"]) for r in rows]


def members(updates) -> dict[int, tuple[str, bool]]:
    """start -> (member, whether it replaces a stored window)"""
    return {r["start"]: (r["member"], r["replaces"]) for r in updates.with_members().to_pylist()}


def test_partials_roll_up_per_window_size_with_the_newest_last():
    table = finest((0, 1, 5, 5, 5, 5, 1_000), (10_000, 2, 3, 1, 2, 2, 15_000),
                   (60_000, 1, 7, 7, 7, 7, 60_000))
    assert values(size_partials(table, "10s")) == [
        (0, 1, 5, 5, 5, 5, 1_000), (10_000, 2, 3, 1, 2, 2, 15_000), (60_000, 1, 7, 7, 7, 7, 60_000)]
    assert values(size_partials(table, "1m")) == [(0, 3, 8, 1, 5, 2, 15_000), (60_000, 1, 7, 7, 7, 7, 60_000)]
    # Equal last ts: the greater value is `last`, whatever order the partials came in.
    tie = finest((10_000, 1, 9, 9, 9, 9, 15_000), (0, 1, 3, 3, 3, 3, 15_000))
    assert values(size_partials(tie, "1h"))[0][5:] == (9, 15_000)


def test_new_windows_are_written_whole_and_later_batches_merge_into_them():
    store = StoredWindows()
    first = store.apply(size_partials(finest((0, 1, 5, 5, 5, 5, 1_000)), "1m"), "1m")
    assert members(first) == {0: ("0;0:1:5:5:5:5:1000", False)}
    # A new key: trimmed by its own fields (none known here), its newest window named.
    assert first.trims == {KEY: (None, 0 - layout.WINDOWS["1m"].retention_ms)} and first.newest == {KEY: 0}
    later = store.apply(size_partials(finest((10_000, 1, 2.5, 2.5, 2.5, 2.5, 500)), "1m"), "1m")
    # The stored last is newer (ts 1000 > 500): it stays; the stored window is replaced (its field), not
    # added to; nothing is removed, so the key keeps its lifetime.
    assert members(later) == {0: ("0;0:2:7.5:2.5:5:5:1000", True)}
    assert later.trims == {} and later.newest == {}
    again = store.apply(size_partials(finest((70_000, 1, 1, 1, 1, 1, 70_000)), "1m"), "1m")
    assert members(again) == {60_000: ("60000;0:1:1:1:1:1:70000", False)} and again.trims == {}
    assert again.newest == {KEY: 60_000}
    replaced = store.apply(size_partials(finest((80_000, 1, 1, 1, 1, 1, 80_000)), "1m"), "1m")
    assert replaced.trims == {} and replaced.newest == {}


def test_a_key_is_trimmed_when_a_window_is_created_in_a_newer_trim_period():
    store = StoredWindows()
    period = layout.trim_period_ms("10s")
    retention = layout.WINDOWS["10s"].retention_ms
    assert store.apply(size_partials(finest((0, 1, 1, 1, 1, 1, 0)), "10s"), "10s").trims == {
        KEY: (None, -retention)}
    # Windows created in the same period as the key's newest: no trim, no new lifetime.
    for start in range(10_000, period, 10_000):
        assert store.apply(size_partials(finest((start, 1, 1, 1, 1, 1, start)), "10s"), "10s").trims == {}
    # The first window of the next period trims the key and sets its lifetime again: the key holds nothing
    # before its newest window's period less retention, so the grid from there is all to delete.
    updates = store.apply(size_partials(finest((period, 1, 1, 1, 1, 1, period)), "10s"), "10s")
    assert updates.trims == {KEY: (-retention, period - retention)}


def test_a_window_member_holds_every_metric_of_the_subject():
    store = StoredWindows()
    store.load("10s", {KEY: (0, [b"0;0:1:5:5:5:5:1000;4:1:7:7:7:7:1000"])})
    # The batch brings one metric only: the member is written whole, the other metric as stored.
    updates = store.apply(size_partials(finest((0, 1, 3, 3, 3, 3, 2_000), metric=LAG), "10s"), "10s")
    new = "0;0:1:5:5:5:5:1000;4:2:10:3:7:3:2000"
    assert members(updates) == {0: (new, True)}
    start, windows = layout.decode_member(new)
    assert start == 0 and windows["records_lag"] == layout.WindowAggregate(0, 2, 10, 3, 7, 3, 2_000)
    # A metric the window did not hold yet joins it, in WINDOW_METRICS order.
    both = pa.concat_tables([finest((10_000, 1, 1, 1, 1, 1, 10_000), metric=LAG),
                             finest((10_000, 1, 2, 2, 2, 2, 10_000))])
    assert members(store.apply(size_partials(both, "10s"), "10s")) == {
        10_000: ("10000;0:1:2:2:2:2:10000;4:1:1:1:1:1:10000", False)}


def test_a_stored_member_is_replaced_whatever_its_text():
    store = StoredWindows()
    # Written by the former in-Redis merge (17 significant digits): replaced by its start, not its text.
    stored = "0;0:1:0.10000000000000001:0.10000000000000001:0.10000000000000001:0.10000000000000001:10"
    store.load("10s", {KEY: (0, [stored.encode()])})
    updates = store.apply(size_partials(finest((0, 1, 1, 1, 1, 1, 5)), "10s"), "10s")
    assert members(updates) == {0: ("0;0:2:1.1:0.1:1:0.1:10", True)}
    assert updates.trims == {}  # its field replaced: the key keeps its lifetime


def test_what_is_not_kept_is_read_from_redis_first():
    store = StoredWindows()
    partials = size_partials(finest((20_000, 1, 1, 1, 1, 1, 20_000)), "10s")
    assert store.uncovered(partials, "10s") == {KEY: 20_000}
    store.load("10s", {KEY: (20_000, [b"20000;0:3:30:5:15:10:25000"])})
    assert store.uncovered(partials, "10s") == {}
    assert store.uncovered(size_partials(finest((20_000, 1, 1, 1, 1, 1, 20_000)), "1m"), "1m") == {KEY: 0}
    assert members(store.apply(partials, "10s")) == {
        20_000: ("20000;0:4:31:1:15:10:25000", True)}
    # A late record for a window older than what is kept: that range is read again.
    late = size_partials(finest((0, 1, 1, 1, 1, 1, 1)), "10s")
    assert store.uncovered(late, "10s") == {KEY: 0}


def test_windows_older_than_the_kept_span_leave_memory_not_redis():
    store = StoredWindows()
    span = keep_ms("10s")
    store.apply(size_partials(finest((0, 1, 1, 1, 1, 1, 0)), "10s"), "10s")
    store.apply(size_partials(finest((span + 10_000, 1, 1, 1, 1, 1, 0)), "10s"), "10s")
    assert store.tables["10s"]["start"].to_pylist() == [span + 10_000]
    assert store.covered_from["10s"][KEY] == 10_000
    assert store.uncovered(size_partials(finest((0, 1, 1, 1, 1, 1, 0)), "10s"), "10s") == {KEY: 0}


def test_a_corrupt_stored_member_is_replaced_by_the_batch_value():
    store = StoredWindows()
    store.load("10s", {KEY: (0, [b"0;not:a:window"])})
    updates = store.apply(size_partials(finest((0, 1, 2, 2, 2, 2, 3)), "10s"), "10s")
    assert members(updates) == {0: ("0;0:1:2:2:2:2:3", True)}


def test_a_topics_merge_part_depends_on_its_name_only():
    first, second = SeriesKeys(), SeriesKeys()
    topics = [("west", "east", f"east.t{t}", 0, "") for t in range(40)]
    first.number(topics)
    second.number(list(reversed(topics)))
    assert {first.keys[i][0]: first.tag_crcs[first.tags[i]] for i in range(40)} == \
        {second.keys[i][0]: second.tag_crcs[second.tags[i]] for i in range(40)}
    assert merge_part("{west|east|east.t1}", 8) == merge_part("{west|east|east.t1}", 8) < 8


def test_subjects_numbered_by_their_columns_as_by_their_tuples():
    # Values that would run together in a plain joined text, an empty group and a null one, not ASCII.
    rows = [("west", "east", "east.a:b", 0, ""), ("west", "east", "east.a", 0, "b:"),
            ("west", "east", "east.a", 0, None), ("west", "east", "east.ä", None, None),
            ("west", "east:east", ".a", 0, ""), ("west", "east", "east.a", 10, "")]
    columns = ("target", "source", "topic", "partition", "group")

    def table(subjects: list[tuple]) -> pa.Table:
        return pa.table({c: pa.array(list(v), pa.int32() if c == "partition" else pa.string())
                         for c, v in zip(columns, zip(*subjects, strict=True), strict=True)})

    by_columns, by_tuples = SeriesKeys(), SeriesKeys()
    # Some numbered through tuples first (as a tool may), then batches of new and known subjects.
    by_columns.number(rows[4:5])
    by_tuples.number(rows[4:5])
    for batch in (rows[:3], rows[1:], rows[::-1]):
        assert by_columns.number_columns(table(batch)).tolist() == by_tuples.number(batch)
    assert by_columns.keys == by_tuples.keys and by_columns.tags == by_tuples.tags
    assert len(set(by_columns.number(rows))) == len(rows)


def test_the_kept_windows_stay_in_window_order_through_merges_and_reads():
    """The merge finds a batch's windows in the kept ones by binary search: they must stay ordered by
    start, series and metric (and Redis's held windows by series and start) whatever order batches and
    reads come in."""
    store = StoredWindows()

    def batch(*rows: tuple[int, int, int]) -> pa.Table:  # (series, metric, start)
        table = pa.table({"series": pa.array([r[0] for r in rows], pa.int64()),
                          "metric": pa.array([r[1] for r in rows], pa.int64()),
                          "start": pa.array([r[2] for r in rows], pa.int64()),
                          **{c: pa.array([1.0] * len(rows)) for c in ("n", "sum", "min", "max", "last")},
                          "last_ts": pa.array([r[2] + 1 for r in rows], pa.int64())})
        return size_partials(table, "10s")

    store.apply(batch((3, LAG, 20_000), (1, COUNT, 10_000), (3, COUNT, 20_000), (2, COUNT, 0)), "10s")
    store.load("10s", {0: (0, [b"10000;0:3:30:5:15:10:15000"]), 5: (0, [])})
    store.apply(batch((2, LAG, 0), (0, COUNT, 20_000), (1, COUNT, 30_000), (3, COUNT, 10_000)), "10s")
    kept = store.tables["10s"].to_pylist()
    keys = [(r["start"], r["series"], r["metric"]) for r in kept]
    assert keys == sorted(keys) and len(set(keys)) == len(keys) == 9
    held = [(r["series"], r["start"]) for r in store.starts["10s"].to_pylist()]
    assert held == sorted(held) == [(0, 10_000), (0, 20_000), (1, 10_000), (1, 30_000), (2, 0), (3, 10_000),
                                    (3, 20_000)]


def test_a_window_read_twice_from_redis_is_kept_once():
    store = StoredWindows()
    store.load("10s", {KEY: (0, [b"10000;0:1:1:1:1:1:10000", b"10000;0:2:4:2:2:2:10001"])})
    assert store.tables["10s"].num_rows == 1 and store.starts["10s"].num_rows == 1
    updates = store.apply(size_partials(finest((10_000, 1, 1, 1, 1, 1, 10_002)), "10s"), "10s")
    assert members(updates) == {10_000: ("10000;0:3:5:1:2:1:10002", True)}
