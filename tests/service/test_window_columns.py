"""The hot path's column decoder gives exactly what the checked per-member decoder gives, for the one metric
it picks out of members holding several."""

from __future__ import annotations

import logging
import math
import random

import pytest

from contract import redis_layout as layout
from contract.redis_layout import WindowAggregate, encode_member
from service.metric_summary import WindowColumns, summarize, summarize_columns
from service.metrics_reader import window_columns
from service.window_decoding import _decode_windows, metric_windows

# The metrics a topic's window holds, as the aggregator writes them.
TOPIC_METRICS = layout.WINDOW_METRICS[:8]
VALUES = [1.0, 6.0, 1 / 3, 1e-7, 1e20, 2.0**64, 123.456, 1e300]
MEASURES = [0.0, *VALUES, -5.5]


def members(count: int, seed: int, metrics: tuple[str, ...] = TOPIC_METRICS) -> list[bytes]:
    """Members as the aggregator writes them; every third lacks a latency (a window without records)."""
    rng = random.Random(seed)
    raw = []
    for i in range(count):
        start = 1_700_000_000_000 + i * 60_000
        held = [m for m in metrics if not (i % 3 == 0 and m.endswith("latency_ms"))]
        raw.append(encode_member(start, {m: window(rng, start) for m in held}).encode())
    return raw


def window(rng: random.Random, start: int) -> WindowAggregate:
    return WindowAggregate(start, rng.choice(VALUES), rng.choice(MEASURES), rng.choice(MEASURES),
                           rng.uniform(-1e9, 1e9), rng.random(), start + rng.randrange(60_000))


def checked(raw: list[bytes | str], metric: str) -> WindowColumns:
    """Through the contract's decoder, bad members left out."""
    windows = []
    for member in raw:
        try:
            found = layout.metric_window(member, metric)
        except ValueError:
            continue
        if found is not None:
            windows.append(found)
    return WindowColumns.of(windows)


@pytest.mark.parametrize("metric", ["record_count", "replication_latency_ms", "target_offset", "group_lag"])
@pytest.mark.parametrize("seed", range(3))
def test_columns_equal_the_checked_decoder_value_and_type(seed, metric):
    raw = members(120, seed)
    fast, slow = window_columns(raw, metric), checked(raw, metric)
    assert fast == slow
    assert len(fast.starts) == {"record_count": 120, "target_offset": 120, "group_lag": 0}.get(metric, 80)
    assert {type(x) for x in fast.starts} <= {int}
    measures = (fast.counts, fast.sums, fast.mins, fast.maxs, fast.lasts)
    assert {type(x) for column in measures for x in column} <= {float}


def test_each_metric_of_a_member_is_its_own_window():
    start = 60_000
    held = {m: WindowAggregate(start, i + 1, 10 * i, i, 2 * i, 3 * i, start + i) for i, m in
            enumerate(("record_count", "records_lag", "lag_seconds"))}
    raw = [encode_member(start, held).encode()]
    for metric, expected in held.items():
        assert window_columns(raw, metric) == WindowColumns.of([expected])
        assert metric_windows(raw, metric) == [expected]
        assert metric_windows(raw, metric)[0].last_ts == expected.last_ts


def test_a_member_without_the_metric_is_absent_not_an_error(caplog):
    raw = members(6, 2)  # members 0 and 3 hold no latency
    with caplog.at_level(logging.WARNING):
        decoded = window_columns(raw, "replication_latency_ms")
    assert decoded.starts == [1_700_000_000_000 + i * 60_000 for i in (1, 2, 4, 5)]
    assert window_columns(raw[:1], "replication_latency_ms") == WindowColumns([], [], [], [], [], [])
    # The service's lines only: a thread of an earlier test in this process may log meanwhile.
    assert not [r for r in caplog.records if r.name.startswith("service.")]


def test_text_members_decode_like_bytes():
    raw = members(10, 9)
    assert window_columns([m.decode() for m in raw], "byte_count") == window_columns(raw, "byte_count")


def test_no_members_are_empty_columns():
    assert window_columns([], "record_count") == WindowColumns([], [], [], [], [], [])
    assert metric_windows([], "record_count") == []


@pytest.mark.parametrize("bad", [
    b"garbage", b"1", b"1;", b"1:2:3:4:5:6:7",  # no segment at all (the last: the legacy layout)
    b"1;0:2:3:4:5", b"1;0:2:3:4:5:6:7:8", b"1;0:2:3:4:5:6:7.5", b"1;0:2:3:4:5:6:7e3",
    b"1.5;0:2:3:4:5:6:7", b"1e3;0:2:3:4:5:6:7", b"x;0:2:3:4:5:6:7", b";0:2:3:4:5:6:7",
    b"1;0:0:3:4:5:6:7", b"1;0:-2:3:4:5:6:7",  # a window of no samples
    b"1;0:2,3:4:5:6:7", b"1;0:[2]:3:4:5:6:7", b'1;0:"2":3:4:5:6:7', b"1;0:true:3:4:5:6:7",
    b"1;0:x:3:4:5:6:7", b"1;0::3:4:5:6:7", b"1;0:2:3],[4:5:6:7", b"1;0:2:3:4:5:6:7],[8:9:10:11:12:13:14",
])
def test_a_bad_member_is_skipped_and_logged_the_rest_served(bad, caplog):
    raw = members(4, 1)
    mixed = [raw[0], bad, *raw[1:]]
    with caplog.at_level(logging.WARNING):
        decoded = window_columns(mixed, "record_count")
        windows = metric_windows(mixed, "record_count")
    assert decoded == checked(raw, "record_count") == WindowColumns.of(windows)
    assert len(decoded.starts) == len(raw)
    assert any("not a window member" in r.getMessage() for r in caplog.records)


def test_a_fault_in_the_metric_read_hides_only_that_member():
    raw = members(4, 1, ("record_count", "byte_count"))
    bad = b"1;0:2:3:4:5:6:7;1:x:3:4:5:6:7"  # byte_count's segment does not parse
    assert window_columns([*raw, bad], "byte_count") == checked(raw, "byte_count")


def test_members_that_only_add_up_to_good_fields_each_are_not_realigned():
    # 4 + 10 fields make 14, as two good windows would: the per-window count must catch it.
    decoded = window_columns([b"1;0:2:3:4", b"6;0:7:8:9:10:11:12:13:14", b"60;0:1:2:3:4:5:6"], "record_count")
    assert decoded == WindowColumns([60], [1.0], [2.0], [3.0], [4.0], [5.0])


def test_numbers_json_lacks_still_decode_as_float_reads_them():
    # encode_member writes repr() of a non-finite value; float() reads it back, JSON cannot.
    decoded = window_columns([b"1;0:1:inf:-inf:1e400:nan:9", b"2;0:1:2:3:4: 5:9"], "record_count")
    assert decoded.starts == [1, 2] and math.isnan(decoded.lasts[0])
    assert (decoded.sums, decoded.mins, decoded.maxs) == ([math.inf, 2.0], [-math.inf, 3.0], [math.inf, 4.0])


def test_windows_keep_their_last_ts_like_the_checked_decoder():
    raw = members(30, 4)
    for metric in TOPIC_METRICS:
        fast, slow = metric_windows(raw, metric), _decode_windows(raw, metric)
        assert fast == slow
        assert [w.last_ts for w in fast] == [w.last_ts for w in slow]
        assert {type(w.count) for w in fast} <= {float}


@pytest.mark.parametrize("metric", ["record_count", "records_lag", "replication_latency_ms"])
def test_column_summary_equals_the_window_summary(metric):
    windows = _decode_windows(members(50, 3), metric)
    assert summarize_columns(metric, "1m", WindowColumns.of(windows)) == summarize(metric, "1m", windows)
