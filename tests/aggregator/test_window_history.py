"""The sink's window history: what Redis holds of a series, kept across batches over the span it is read."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.window_history import KEEP_SLACK_MS, WindowHistory, series_id
from contract.redis_layout import WindowAggregate, merge_windows

KEEP_MS = 1_200_000


def window(start_ms: int, last: float) -> WindowAggregate:
    return WindowAggregate(start_ms, 1, last, last, last, last, start_ms)


def test_a_series_is_kept_over_twice_the_span_it_was_read_for():
    history = WindowHistory(KEEP_MS)
    history.load("offsets", 0, [window(0, 1), window(10_000, 2)], span_ms=20_000)
    history.load("ends", 0, [window(0, 1), window(10_000, 2)])
    for start in range(20_000, 200_000, 10_000):
        for series in ("offsets", "ends"):
            history.merge(series, [window(start, start)])
            history.expire(series)
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
    history.merge("ends", [window(start, 1) for start in range(0, 3 * span, 10_000)])
    history.expire("ends")
    newest = 3 * span - 10_000
    assert min(history.series["ends"].windows) == newest - span - KEEP_SLACK_MS
    assert history.covers("ends", newest - span - KEEP_SLACK_MS)
    assert not history.covers("ends", newest - span - KEEP_SLACK_MS - 10_000)


def test_a_span_longer_than_the_history_keeps_is_cut_to_it():
    history = WindowHistory(KEEP_MS)
    history.load("ends", 0, [], span_ms=KEEP_MS * 3)
    history.merge("ends", [window(start, 1) for start in range(0, 3 * KEEP_MS, 10_000)])
    history.expire("ends")
    assert min(history.series["ends"].windows) == 3 * KEEP_MS - 10_000 - KEEP_MS


# --- the bisected view and in-place merge against the plain dict scan they replaced ------------------

class ScannedHistory:
    """The history as it was: every view scans and sorts the kept windows (the oracle)."""

    def __init__(self, keep_ms: int) -> None:
        self.keep_ms, self.low = keep_ms, 0
        self.windows: dict[int, WindowAggregate] = {}  # by start

    def load(self, low_ms: int, stored: list[WindowAggregate]) -> None:
        self.low, self.windows = low_ms, {w.start_ms: w for w in stored if w.start_ms >= low_ms}

    def view(self, low_ms: int, high_ms: int, partials: list[WindowAggregate]) -> list[WindowAggregate]:
        merged = {s: w for s, w in self.windows.items() if low_ms <= s <= high_ms}
        for p in partials:
            if low_ms <= p.start_ms <= high_ms:
                merged[p.start_ms] = merge_windows(merged[p.start_ms], p) if p.start_ms in merged else p
        return [merged[s] for s in sorted(merged)]

    def commit(self, partials: list[WindowAggregate]) -> None:
        for p in partials:
            if p.start_ms >= self.low:
                old = self.windows.get(p.start_ms)
                self.windows[p.start_ms] = merge_windows(old, p) if old else p
        if self.windows:
            floor = max(self.windows) - self.keep_ms
            if floor > self.low:
                self.low = floor
                self.windows = {s: w for s, w in self.windows.items() if s >= floor}


def _windows(draw_starts: list[int], values: list[float], tss: list[int | None]) -> list[WindowAggregate]:
    return [WindowAggregate(s * 10_000, 1, v, v, v, v, None if t is None else s * 10_000 + t)
            for s, v, t in zip(draw_starts, values, tss, strict=False)]


_partials = st.builds(
    _windows, st.lists(st.integers(0, 40), max_size=12),  # out of order, repeated, gaps
    st.lists(st.sampled_from([0.0, 1.0, 2.0, 5.0]), min_size=12, max_size=12),
    st.lists(st.one_of(st.none(), st.integers(0, 9_999)), min_size=12, max_size=12))


@settings(max_examples=300, deadline=None)
@given(stored=_partials, low_window=st.integers(0, 10), batches=st.lists(
    st.tuples(_partials, st.integers(-5, 45), st.integers(0, 30), st.one_of(st.none(), st.integers(0, 12))),
    max_size=6), keep_windows=st.integers(1, 20))
def test_views_and_commits_match_the_scanned_history(stored, low_window, batches, keep_windows):
    keep_ms = keep_windows * 10_000
    history, oracle = WindowHistory(keep_ms), ScannedHistory(keep_ms)
    history.load("s", low_window * 10_000, stored)
    oracle.load(low_window * 10_000, stored)
    for partials, low, width, newest in batches:
        # A view reads what the history covers (the sink loads the rest from Redis first).
        low_ms = max(low * 10_000, history.series["s"].low_ms)
        high_ms = (low + width) * 10_000
        expected = oracle.view(low_ms, high_ms, partials)
        if newest is not None:
            expected = expected[-newest:] if newest else []
        history.merge("s", partials)  # a batch's partials, merged before its views
        viewed = history.view("s", low_ms, high_ms, newest=newest)
        assert _with_last_ts(viewed) == _with_last_ts(expected)  # a window's == leaves last_ts out
        history.expire("s")  # once the batch commits
        oracle.commit(partials)
        kept = history.series["s"]
        assert (kept.low_ms, kept.windows) == (oracle.low, oracle.windows)
        assert _with_last_ts(kept.windows.values()) == _with_last_ts(oracle.windows.values())
        assert kept.starts == sorted(oracle.windows)
        assert all(w is kept.windows[s] for s, w in zip(kept.starts, kept.ordered, strict=True))


def _with_last_ts(windows: Iterable[WindowAggregate]) -> list[tuple[WindowAggregate, int | None]]:
    return [(w, w.last_ts) for w in windows]


def test_one_series_id_object_a_series_whether_group_is_named_or_not() -> None:
    # The sink's dict lookups find their keys by identity only when every caller gets the same object.
    assert series_id("t", "s", "x", 1, "records_lag") is series_id("t", "s", "x", 1, "records_lag", None)
