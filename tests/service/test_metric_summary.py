"""Pure rules: range summaries per metric kind, merging subjects, downsampling for maxDataPoints."""

from __future__ import annotations

import pytest

from contract.redis_layout import WindowAggregate
from service.metric_summary import downsample, merge_subjects, summarize


def w(start: int, count: float, total: float, low: float, high: float, last: float) -> WindowAggregate:
    return WindowAggregate(start, count, total, low, high, last)


def test_merge_adds_counts_sums_and_levels_per_window():
    a = [w(0, 1, 10, 10, 10, 10), w(10, 1, 5, 5, 5, 5)]
    b = [w(10, 2, 8, 3, 5, 5), w(20, 1, 1, 1, 1, 1)]
    assert merge_subjects([a, b]) == [w(0, 1, 10, 10, 10, 10), w(10, 3, 13, 3, 5, 10), w(20, 1, 1, 1, 1, 1)]


def test_downsample_buckets_keep_the_newest_last():
    windows = [w(0, 1, 1, 1, 1, 1), w(10, 1, 4, 4, 4, 4), w(20, 1, 2, 2, 2, 2)]
    assert downsample(windows, 20) == [w(0, 2, 5, 1, 4, 4), w(20, 1, 2, 2, 2, 2)]
    assert downsample(windows, 0) == windows


def test_summaries_follow_the_metric_kind():
    windows = [w(0, 2, 30, 10, 20, 20), w(10, 1, 5, 5, 5, 5)]
    counter = summarize("record_count", "10s", windows)
    assert (counter.value, counter.min, counter.max, counter.avg) == (35, 5, 30, 17.5)
    gauge = summarize("records_lag", "10s", windows)
    assert (gauge.value, gauge.min, gauge.max) == (5, 5, 20)
    latency = summarize("replication_latency_ms", "10s", windows)
    assert latency.value == pytest.approx(35 / 3) and latency.series[0].avg == 15


def test_empty_range_has_no_value():
    empty = summarize("byte_count", "1m", [])
    assert empty.value is None and empty.series == [] and empty.count == 0
