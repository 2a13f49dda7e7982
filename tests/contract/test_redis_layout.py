"""Key layout: encode/decode round trips, hash tags, windows and the auto granularity."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from contract import redis_layout as layout
from contract.redis_layout import SeriesId, WindowAggregate


def parse_series_key(key: str) -> tuple[SeriesId, str]:
    """Reads a key back, to show that distinct series never share one."""
    try:
        prefix, kind, rest = key.split(":", 2)
        tag_end = rest.index("}")
        target, source, topic = (unquote(x) for x in rest[1:tag_end].split("|"))
        partition, group, metric, window = rest[tag_end + 2:].split(":")
        if (prefix, kind) != (layout.PREFIX, "ts") or window not in layout.WINDOWS:
            raise ValueError(key)
        series = SeriesId(target, source, topic, int(partition), unquote(metric),
                          unquote(group) if group else None)
    except ValueError:
        raise ValueError(f"not a series key: {key!r}") from None
    return series, window


@pytest.mark.parametrize("series", [
    SeriesId("west", "east", "east.orders", 3, "record_count"),
    SeriesId("west", "east", "east.orders", layout.WHOLE_TOPIC, "replication_latency_ms"),
    SeriesId("west", "east", "east.t", 0, "group_lag", group="odd:group|{name}%"),
])
@pytest.mark.parametrize("window", list(layout.WINDOWS))
def test_series_key_round_trip(series, window):
    key = layout.series_key(series, window)
    assert parse_series_key(key) == (series, window)


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


def test_member_round_trip_keeps_integers_exact():
    agg = WindowAggregate(1_700_000_010_000, 3, 1234567890123, 1, 1234567890000, 7.5)
    member = layout.encode_member(agg)
    assert member == "1700000010000:3:1234567890123:1:1234567890000:7.5"
    assert layout.decode_member(member) == agg
    assert layout.decode_member(member.encode()).avg == pytest.approx(1234567890123 / 3)


def test_bad_member_is_rejected():
    with pytest.raises(ValueError, match="not a window member"):
        layout.decode_member("1:2:3")


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


def test_member_keeps_the_last_ts_and_reads_members_without_it():
    agg = WindowAggregate(10_000, 2, 3, 1, 2, 2, 15_000)
    assert layout.encode_member(agg) == "10000:2:3:1:2:2:15000"
    assert layout.decode_member("10000:2:3:1:2:2:15000").last_ts == 15_000
    assert layout.decode_member("10000:2:3:1:2:2").last_ts is None
    assert layout.decode_member("10000:2:3:1:2:2") == agg  # the last ts is not part of the value


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
