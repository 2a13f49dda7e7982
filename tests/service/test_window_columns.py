"""The hot path's column decoder gives exactly what the checked per-member decoder gives."""

from __future__ import annotations

import logging
import math
import random

import pytest

from contract.redis_layout import WindowAggregate, decode_member, encode_member
from service.metric_summary import WindowColumns, summarize, summarize_columns
from service.metrics_reader import window_columns


def members(count: int, seed: int) -> list[bytes]:
    """Members as the aggregator writes them (with the last value's ts) and, every third, as older
    versions did (without)."""
    rng = random.Random(seed)
    values = [0.0, 1.0, 6.0, 1 / 3, 1e-7, 1e20, 2.0**64, 123.456, -5.5, 1e300]
    windows = []
    for i in range(count):
        start = 1_700_000_000_000 + i * 60_000
        last_ts = None if i % 3 == 0 else start + rng.randrange(60_000)
        windows.append(WindowAggregate(start, rng.choice(values), rng.choice(values), rng.choice(values),
                                       rng.uniform(-1e9, 1e9), rng.random(), last_ts))
    return [encode_member(w).encode() for w in windows]


def checked(raw: list[bytes | str]) -> WindowColumns:
    return WindowColumns.of([decode_member(m) for m in raw])


@pytest.mark.parametrize("seed", range(5))
def test_columns_equal_the_checked_decoder_value_and_type(seed):
    raw = members(120, seed)
    fast, slow = window_columns(raw), checked(raw)
    assert fast == slow
    assert [type(x) for x in fast.starts] == [int] * 120
    measures = (fast.counts, fast.sums, fast.mins, fast.maxs, fast.lasts)
    assert {type(x) for column in measures for x in column} == {float}


def test_text_members_decode_like_bytes():
    raw = members(10, 9)
    assert window_columns([m.decode() for m in raw]) == window_columns(raw)


def test_no_members_are_empty_columns():
    assert window_columns([]) == WindowColumns([], [], [], [], [], [])


@pytest.mark.parametrize("bad", [
    b"garbage", b"1:2:3:4:5", b"1:2:3:4:5:6:7.5", b"1:2:3:4:5:6:7:8", b"1:2:3:4:5:6:7e3",
    b"1.5:2:3:4:5:6", b"1:2,3:4:5:6", b"1:[2]:3:4:5:6",
    b'1:"2":3:4:5:6', b"1:true:3:4:5:6", b"1:x:3:4:5:6", b"1::3:4:5:6",
    b"1:2:3],[4:5:6", b"1:2:3:4:5:6],[7:8:9:10:11:12", b"1e3:2:3:4:5:6", b"1:2:3:4:5:6:",
])
def test_a_bad_member_is_skipped_and_logged_the_rest_served(bad, caplog):
    raw = members(4, 1)
    with caplog.at_level(logging.WARNING):
        decoded = window_columns([raw[0], bad, *raw[1:]])
    good = [m for m in [raw[0], bad, *raw[1:]] if _parses(m)]
    assert decoded == checked(good)
    assert len(decoded.starts) == len(good)


def test_members_that_only_add_up_to_good_fields_each_are_not_realigned():
    # 4 + 8 fields make 12, as two good members would: the per-member count must catch it.
    decoded = window_columns([b"1:2:3:4", b"6:7:8:9:10:11:12:13", b"60:1:2:3:4:5"])
    assert decoded == WindowColumns([60], [1.0], [2.0], [3.0], [4.0], [5.0])


def test_numbers_json_lacks_still_decode_as_float_reads_them():
    # encode_member writes repr() of a non-finite value; float() reads it back, JSON cannot.
    decoded = window_columns([b"1:nan:inf:-inf:1e400:5", b"2:1:2:3:4: 5"])
    assert decoded.starts == [1, 2] and math.isnan(decoded.counts[0])
    assert (decoded.sums, decoded.mins, decoded.maxs) == ([math.inf, 2.0], [-math.inf, 3.0], [math.inf, 4.0])
    assert decoded.lasts == [5.0, 5.0]


def _parses(member: bytes) -> bool:
    try:
        decode_member(member)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("metric", ["record_count", "records_lag", "replication_latency_ms"])
def test_column_summary_equals_the_window_summary(metric):
    windows = [decode_member(m) for m in members(50, 3)]
    assert summarize_columns(metric, "1m", WindowColumns.of(windows)) == summarize(metric, "1m", windows)


@pytest.mark.parametrize("bad_ts", [b"7.5", b"7e3"])
def test_members_all_with_last_ts_decode_like_the_checked_decoder(bad_ts):
    raw = [m for m in members(30, 4) if m.count(b":") == 6]
    assert window_columns(raw) == checked(raw)
    with_bad = [*raw, b"1:2:3:4:5:6:" + bad_ts]
    assert window_columns(with_bad) == checked(raw)
