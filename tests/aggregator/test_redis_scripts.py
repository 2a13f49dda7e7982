"""The aggregator's Redis script arguments (no Redis needed)."""

from __future__ import annotations

from aggregator.redis_scripts import replace_args
from contract import redis_layout as layout


def test_replace_args_carry_the_window_counts_cut_off_and_the_key_lifetime():
    key = layout.series_key(layout.SeriesId("west", "east", "east.t", 0, "record_count"), "1m")
    assert replace_args(key, 2, 2, None) == [2, 2, "", layout.key_ttl_ms("1m")]
    # A new window: the retention cut-off travels and resets the key's lifetime (see key_ttl_ms).
    assert replace_args(key, 1, 0, 5_000) == [1, 0, "5000", layout.key_ttl_ms("1m")]
