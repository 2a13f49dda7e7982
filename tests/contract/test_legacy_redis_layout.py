"""The layout before WINDOW_METRICS: its keys read back into (series, window), for the upgrade."""

from __future__ import annotations

import fnmatch

import pytest

from contract import legacy_redis_layout as legacy
from contract import redis_layout as layout
from contract.redis_layout import SeriesId

ODD = "a:b|c{d}%"


@pytest.mark.parametrize("series", [
    SeriesId("west", "east", "east.orders", 3, "record_count"),
    SeriesId("west", "east", "east.orders", layout.WHOLE_TOPIC, "replication_latency_ms"),
    SeriesId("west", "east", layout.ALL_TOPICS, layout.WHOLE_TOPIC, "byte_count"),
    SeriesId("west", "east", "east.t", 0, "group_lag", group=ODD),
    SeriesId(ODD, "s*[?]\\", "t é/%20", 7, "some:metric", group=" "),
])
@pytest.mark.parametrize("window", list(layout.WINDOWS))
def test_legacy_key_round_trip(series, window):
    key = legacy.legacy_series_key(series, window)
    assert legacy.parse_legacy_series_key(key) == (series, window)
    assert legacy.parse_legacy_series_key(key.encode()) == (series, window)


@pytest.mark.parametrize("key", [
    "srm:ts:nonsense", "srm:win:{w|e|t}:0::10s", "srm:ts:{w|e|t}:0::record_count:5m",
    "srm:ts:{w|e}:0::record_count:10s", "srm:ts:{w|e|t}:x::record_count:10s",
    "srm:ts:{w|e|t}:+0::record_count:10s", "srm:ts:{w|e|t}:0:a:b:record_count:10s",
    "srm:ts:{w|e|t}:0::record count:10s",  # not as _part writes it: would be two keys for one series
])
def test_what_is_not_a_legacy_key_is_refused(key):
    with pytest.raises(ValueError, match="not a legacy series key"):
        legacy.parse_legacy_series_key(key)


@pytest.mark.parametrize("target", ["west", ODD, "w*st", "w[e]st?", "w\\st"])
def test_the_target_pattern_matches_its_keys_only(target):
    pattern = legacy.legacy_target_pattern(target)
    own = legacy.legacy_series_key(SeriesId(target, "e", "t", 0, "record_count", group="g"), "10s")
    other = legacy.legacy_series_key(SeriesId(target + "x", "e", "t", 0, "record_count"), "10s")
    new = layout.series_key(SeriesId(target, "e", "t", 0, "record_count"), "10s")
    assert redis_glob(pattern, own) and not redis_glob(pattern, other) and not redis_glob(pattern, new)


def redis_glob(pattern: str, key: str) -> bool:
    """Redis's glob, enough for these patterns: a backslash escapes the next character."""
    translated, i = "", 0
    while i < len(pattern):
        if pattern[i] == "\\":
            translated += "[" + pattern[i + 1] + "]" if pattern[i + 1] != "[" else "[[]"
            i += 2
        else:
            translated += pattern[i]
            i += 1
    return fnmatch.fnmatchcase(key, translated)
