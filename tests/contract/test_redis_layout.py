"""Key layout: encode/decode round trips, hash tags, windows and the auto granularity."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from urllib.parse import unquote

import pytest

from contract import legacy_redis_layout as legacy
from contract import redis_layout as layout
from contract.records.raw_metrics import SERVED_METRICS
from contract.redis_layout import SeriesId, WindowAggregate

# (target, source, topic, partition, group): what a series key names; its metric is in the members.
Subject = tuple[str, str, str, int, str | None]


def parse_series_key(key: str) -> tuple[Subject, str]:
    """Reads a key back, to show that distinct subjects never share one."""
    try:
        prefix, kind, rest = key.split(":", 2)
        tag_end = rest.index("}")
        target, source, topic = (unquote(x) for x in rest[1:tag_end].split("|"))
        partition, group, window = rest[tag_end + 2:].split(":")
        if (prefix, kind) != (layout.PREFIX, "wh") or window not in layout.WINDOWS:
            raise ValueError(key)
        subject = (target, source, topic, int(partition), unquote(group) if group else None)
    except ValueError:
        raise ValueError(f"not a series key: {key!r}") from None
    return subject, window


def subject_of(series: SeriesId) -> Subject:
    return series.target, series.source, series.topic, series.partition, series.group


@pytest.mark.parametrize("series", [
    SeriesId("west", "east", "east.orders", 3, "record_count"),
    SeriesId("west", "east", "east.orders", layout.WHOLE_TOPIC, "replication_latency_ms"),
    SeriesId("west", "east", "east.t", 0, "group_lag", group="odd:group|{name}%"),
])
@pytest.mark.parametrize("window", list(layout.WINDOWS))
def test_series_key_round_trip(series, window):
    key = layout.series_key(series, window)
    assert parse_series_key(key) == (subject_of(series), window)


def test_the_metrics_of_one_subject_share_its_key():
    keys = {layout.series_key(SeriesId("west", "east", "east.t", 2, m), "1m") for m in SERVED_METRICS}
    assert len(keys) == 1
    group = {layout.series_key(SeriesId("west", "east", "east.t", 2, m, group="g"), "1m")
             for m in ("group_lag", "checkpoint_latency_ms")}
    assert len(group) == 1 and keys.isdisjoint(group)


@pytest.mark.parametrize("other", [
    SeriesId("west", "east", "east.t", 3, "record_count"),
    SeriesId("west", "east", "east.t", layout.WHOLE_TOPIC, "record_count"),
    SeriesId("west", "east", "east.u", 2, "record_count"),
    SeriesId("west", "north", "east.t", 2, "record_count"),
    SeriesId("south", "east", "east.t", 2, "record_count"),
    SeriesId("west", "east", "east.t", 2, "record_count", group="g"),
])
def test_different_subjects_have_different_keys(other):
    one = SeriesId("west", "east", "east.t", 2, "byte_count")
    assert layout.series_key(one, "1m") != layout.series_key(other, "1m")
    assert layout.series_key(one, "1m") != layout.series_key(one, "10s")


def test_series_of_one_topic_share_a_hash_tag():
    a = layout.series_key(SeriesId("west", "east", "east.t", 0, "record_count"), "10s")
    b = layout.series_key(SeriesId("west", "east", "east.t", 5, "byte_count", group="g"), "1h")
    tag = lambda key: key[key.index("{"): key.index("}") + 1]  # noqa: E731
    assert tag(a) == tag(b) == "{west|east|east.t}"


def test_group_ids_cannot_break_the_key_structure():
    key = layout.series_key(SeriesId("w", "e", "e.t", 0, "group_lag", group="a}b:c|d"), "10s")
    assert key.count("}") == 1 and key.count("|") == 2


def test_unknown_window_and_bad_keys_are_rejected():
    with pytest.raises(ValueError, match="unknown window '5m'"):
        layout.series_key(SeriesId("w", "e", "t", 0, "m"), "5m")
    with pytest.raises(ValueError, match="not a series key"):
        parse_series_key("srm:ts:nonsense")


START = 1_700_000_010_000


def test_member_round_trip_keeps_integers_exact():
    counts = WindowAggregate(START, 3, 1234567890123, 1, 1234567890000, 7.5, START + 9_000)
    lag = WindowAggregate(START, 1, 0.25, 0.25, 0.25, 0.25, START + 5_000)
    member = layout.encode_member(START, {"records_lag": lag, "record_count": counts})
    assert member == ("1700000010000;0:3:1234567890123:1:1234567890000:7.5:1700000019000"
                      ";4:1:0.25:0.25:0.25:0.25:1700000015000")
    start, windows = layout.decode_member(member)
    assert (start, windows) == (START, {"record_count": counts, "records_lag": lag})
    assert [w.last_ts for w in windows.values()] == [START + 9_000, START + 5_000]
    assert layout.decode_member(member.encode())[1]["record_count"].avg == pytest.approx(1234567890123 / 3)


def test_a_member_does_not_depend_on_the_order_metrics_are_given_in():
    windows = {m: WindowAggregate(START, i + 1, i, i, i, i, START)
               for i, m in enumerate(layout.WINDOW_METRICS)}
    backwards = dict(reversed(windows.items()))
    assert layout.encode_member(START, windows) == layout.encode_member(START, backwards)
    assert layout.decode_member(layout.encode_member(START, backwards)) == (START, windows)


def test_a_window_without_last_ts_is_stored_with_its_start():
    member = layout.encode_member(START, {"byte_count": WindowAggregate(START, 2, 3, 1, 2, 2)})
    assert member == f"{START};1:2:3:1:2:2:{START}"
    assert layout.metric_window(member, "byte_count").last_ts == START


def test_metric_window_picks_one_metric_or_none():
    lag = WindowAggregate(START, 1, 7, 7, 7, 7, START + 1)
    counts = WindowAggregate(START, 1, 2, 2, 2, 2)
    member = layout.encode_member(START, {"records_lag": lag, "record_count": counts})
    assert layout.metric_window(member, "records_lag") == lag
    assert layout.metric_window(member.encode(), "replication_latency_ms") is None


def test_a_metric_without_an_index_cannot_be_encoded():
    with pytest.raises(ValueError, match="'bogus' has no place"):
        layout.encode_member(START, {"bogus": WindowAggregate(START, 1, 1, 1, 1, 1)})


def test_every_stored_metric_has_a_fixed_index():
    # Stored members name metrics by index: the tuple may only grow at its end.
    assert layout.WINDOW_METRICS[:15] == (
        "record_count", "byte_count", "replication_latency_ms", "record_age_ms", "records_lag",
        "source_end_offset", "upstream_offset", "target_offset", "checkpoint_latency_ms",
        "group_upstream_offset", "group_downstream_offset", "group_lag", "lag_seconds",
        "group_lag_seconds", "invalid_records")
    assert set(layout.WINDOW_METRICS) == {*SERVED_METRICS, layout.INVALID_RECORDS_METRIC}


@pytest.mark.parametrize("member", [
    "1700000010000",  # no segment
    "1700000010000;",  # an empty segment
    "1700000010000;0:1:2:3:4:5",  # six fields
    "1700000010000;0:1:2:3:4:5:6:7",  # eight fields
    "1700000010000;15:1:2:3:4:5:6",  # an index past WINDOW_METRICS
    "1700000010000;-1:1:2:3:4:5:6",  # a negative index
    "1700000010000;0:1:2:3:4:5:6;0:1:2:3:4:5:6",  # one metric twice
    "1700000010000;1:1:2:3:4:5:6;1:2:2:3:4:5:6",  # one metric twice, other values
    "1700000010000;0:0:0:0:0:0:6",  # count 0: a window of no samples
    "1700000010000;0:-1:2:3:4:5:6",  # a negative count
    "1700000010000;0:nan:2:3:4:5:6",
    "1700000010000;0:1:2:3:4:5:6.5",  # last ts not an integer
    "1700000010000;0:1:x:3:4:5:6",
    "1700000010000.5;0:1:2:3:4:5:6",  # start not an integer
    "1700000010000;0:1:2:3:4:5:6;",  # a trailing separator
    "1700000010000:3:1234567890123:1:1234567890000:7.5:1700000019000",  # the legacy layout
    "",
])
def test_bad_member_is_rejected_naming_it(member):
    with pytest.raises(ValueError, match=re.escape(f"not a window member: {member!r}")):
        layout.decode_member(member)
    with pytest.raises(ValueError, match=re.escape(f"not a window member: {member!r}")):
        layout.metric_window(member.encode(), "record_count")


def test_window_start_aligns_to_window_size():
    ts = 1_700_000_123_456
    assert layout.window_start(ts, "10s") == 1_700_000_120_000
    assert layout.window_start(ts, "1m") == 1_700_000_100_000
    assert layout.window_start(ts, "1h") == 1_699_999_200_000


@pytest.mark.parametrize("span_ms, expected", [
    (0, "10s"), (2 * 3_600_000, "10s"), (3 * 3_600_000, "1m"), (12 * 3_600_000, "1m"),
    (3 * 86_400_000, "1h"), (365 * 86_400_000, "1h"),
])
def test_auto_window_keeps_points_bounded(span_ms, expected):
    assert layout.auto_window(0, span_ms) == expected


def test_coarser_windows_are_exact_multiples_of_the_finest():
    sizes = [w.size_ms for w in layout.WINDOWS.values()]
    assert sizes[0] == layout.FINEST_WINDOW.size_ms
    assert all(big % small == 0 for small, big in zip(sizes, sizes[1:], strict=False))
    assert all(w.retention_ms < layout.key_ttl_ms(w.name) for w in layout.WINDOWS.values())


def test_window_fields_are_the_grid_starts_of_the_range_bounds_included():
    assert layout.window_fields("1m", 60_000, 240_000) == ["60000", "120000", "180000", "240000"]
    assert layout.window_fields("1m", 60_001, 239_999) == ["120000", "180000"]
    assert layout.window_fields("10s", 5_000, 9_999) == []
    assert layout.window_fields("1h", 0, 0) == ["0"]


def test_hash_members_are_the_windows_oldest_first_without_the_newest_field():
    fields = {b"120000": b"b", b"60000": b"a", layout.NEWEST_FIELD.encode(): b"120000", b"900000": b"c"}
    assert layout.hash_members(fields) == [b"a", b"b", b"c"]
    assert layout.held([None, b"a", None, b"b"]) == [b"a", b"b"]


@pytest.mark.parametrize("series", [SeriesId("west", "east", "east.t", 3, ""),
                                    SeriesId("w", "e", "e.t", 0, "", group="odd:group|{name}%")])
def test_sorted_set_keys_of_the_layout_before_read_back_for_the_upgrade(series):
    key = legacy.sorted_series_key(series, "1m")
    assert key.startswith("srm:win:{")
    assert legacy.parse_sorted_series_key(key) == (series, "1m")
    with pytest.raises(ValueError, match="not a sorted-set series key"):
        legacy.parse_sorted_series_key(key.replace(":1m", ":5m"))


def test_legacy_members_still_read_for_the_upgrade():
    agg = WindowAggregate(10_000, 2, 3, 1, 2, 2, 15_000)
    assert legacy.decode_legacy_member("10000:2:3:1:2:2:15000").last_ts == 15_000
    assert legacy.decode_legacy_member(b"10000:2:3:1:2:2").last_ts is None
    assert legacy.decode_legacy_member("10000:2:3:1:2:2") == agg  # the last ts is not part of the value
    key = legacy.legacy_series_key(SeriesId("w", "e", "e.t", 0, "record_count"), "10s")
    assert key == "srm:ts:{w|e|e.t}:0::record_count:10s"


def test_merge_keeps_the_newest_last_and_breaks_ties_by_value():
    a = WindowAggregate(0, 2, 10, 4, 6, 6, 5_000)
    b = WindowAggregate(0, 1, 3, 3, 3, 3, 7_000)
    tie = WindowAggregate(0, 1, 9, 9, 9, 9, 7_000)
    assert layout.merge_windows(a, b) == WindowAggregate(0, 3, 13, 3, 6, 3)
    assert layout.merge_windows(b, a).last_ts == 7_000
    assert layout.merge_windows(b, tie).last == layout.merge_windows(tie, b).last == 9
    assert layout.merge_windows(WindowAggregate(0, 1, 1, 1, 1, 8), b).last == 3  # no last ts: the start


def test_latest_keys_and_values():
    assert layout.replication_status_key("w", "e").endswith(":replication")
    assert "{w|e|e.t}" in layout.partition_latest_key("w", "e", "e.t")
    assert "a%7Cb" in layout.group_latest_key("w", "e", "a|b")
    value = {"ts": 5, "records_lag": 3, "lag_seconds": None}
    assert layout.decode_latest(layout.encode_latest(value)) == value
    with pytest.raises(ValueError, match="not a latest-value record"):
        layout.decode_latest(b'{"no": "ts"}')


@pytest.mark.usefixtures("external_processes")
def test_a_series_id_hashed_once_finds_its_equal_after_a_pickle_from_another_process() -> None:
    """The hash is cached: a pickle must rebuild it, since a string's hash differs between processes."""
    made = SeriesId("t", "s", "x", 1, "end_offset")
    assert made == SeriesId("t", "s", "x", 1, "end_offset", None)
    assert hash(made) == hash(("t", "s", "x", 1, "end_offset", None))
    assert "_hash" not in repr(made)
    # The child pickles with another hash seed; this process must find the series under its own hash.
    code = ("import pickle, sys; from contract.redis_layout import SeriesId; "
            "sys.stdout.buffer.write(pickle.dumps(SeriesId('t', 's', 'x', 1, 'end_offset')))")
    env = {"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(p for p in sys.path if p)}
    sent = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env).stdout
    assert {made: "found"}.get(pickle.loads(sent)) == "found"
