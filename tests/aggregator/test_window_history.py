"""The sink's window history: what Redis holds of a series, kept across batches over the span it is read."""

from __future__ import annotations

from aggregator.window_history import KEEP_SLACK_MS, WindowHistory
from contract.redis_layout import WindowAggregate

KEEP_MS = 1_200_000


def window(start_ms: int, last: float) -> WindowAggregate:
    return WindowAggregate(start_ms, 1, last, last, last, last, start_ms)


def test_a_series_is_kept_over_twice_the_span_it_was_read_for():
    history = WindowHistory(KEEP_MS)
    history.load("offsets", 0, [window(0, 1), window(10_000, 2)], span_ms=20_000)
    history.load("ends", 0, [window(0, 1), window(10_000, 2)])
    for start in range(20_000, 200_000, 10_000):
        history.commit("offsets", [window(start, start)])
        history.commit("ends", [window(start, start)])
    newest = 190_000
    assert min(history.series["offsets"].windows) == newest - 40_000
    assert history.covers("offsets", newest - 40_000) and not history.covers("offsets", newest - 50_000)
    assert min(history.series["ends"].windows) == 0 and history.covers("ends", 0)  # within keep_ms
    viewed = history.view("offsets", newest - 20_000, newest)
    assert [w.start_ms for w in viewed] == [170_000, 180_000, 190_000]


def test_a_long_span_is_kept_with_a_bounded_slack():
    """Lag in seconds reads 10 minutes of end offsets: twice that (held ~10^6 windows at 2,000 partitions)
    is not needed to read a report a little older than the newest window."""
    span = 600_000
    history = WindowHistory(KEEP_MS)
    history.load("ends", 0, [], span_ms=span)
    history.commit("ends", [window(start, 1) for start in range(0, 3 * span, 10_000)])
    newest = 3 * span - 10_000
    assert min(history.series["ends"].windows) == newest - span - KEEP_SLACK_MS
    assert history.covers("ends", newest - span - KEEP_SLACK_MS)
    assert not history.covers("ends", newest - span - KEEP_SLACK_MS - 10_000)


def test_a_span_longer_than_the_history_keeps_is_cut_to_it():
    history = WindowHistory(KEEP_MS)
    history.load("ends", 0, [], span_ms=KEEP_MS * 3)
    history.commit("ends", [window(start, 1) for start in range(0, 3 * KEEP_MS, 10_000)])
    assert min(history.series["ends"].windows) == 3 * KEEP_MS - 10_000 - KEEP_MS
