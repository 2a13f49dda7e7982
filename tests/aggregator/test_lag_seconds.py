"""Lag-in-seconds table and interpolation, after kafka-lag-exporter's LookupTable rules."""

from __future__ import annotations

import random

import pytest

from aggregator.lag_seconds import (
    DEFAULT_TABLE_CAPACITY,
    OffsetPoint,
    OffsetTimeTable,
    lag_seconds,
)


def table_of(*points: tuple[int, int], capacity: int = DEFAULT_TABLE_CAPACITY) -> OffsetTimeTable:
    return OffsetTimeTable.from_points((OffsetPoint(o, t) for o, t in points), capacity)


def pairs(table: OffsetTimeTable) -> list[tuple[int, int]]:
    return [(p.offset, p.timestamp_ms) for p in table.points]


@pytest.mark.parametrize(
    ("appended", "capacity", "expected"),
    [
        pytest.param([], 5, [], id="empty"),
        pytest.param([(10, 1000)], 5, [(10, 1000)], id="one point"),
        pytest.param(
            [(10, 1000), (20, 2000), (30, 3000)],
            5,
            [(10, 1000), (20, 2000), (30, 3000)],
            id="increasing points kept in order",
        ),
        pytest.param([(10, 1000), (20, 1000)], 5, [(10, 1000)], id="same time rejected"),
        pytest.param([(10, 2000), (20, 1000)], 5, [(10, 2000)], id="older time rejected"),
        pytest.param([(20, 1000), (10, 2000)], 5, [(20, 1000)], id="lower offset rejected"),
        pytest.param([(10, 1000), (10, 2000)], 5, [(10, 1000), (10, 2000)], id="two equal offsets kept"),
        pytest.param(
            [(5, 500), (10, 1000), (10, 2000), (10, 3000), (10, 4000)],
            5,
            [(5, 500), (10, 1000), (10, 4000)],
            id="flat run compressed to its first and last point",
        ),
        pytest.param(
            [(10, 1000), (10, 2000), (10, 3000), (20, 4000)],
            5,
            [(10, 1000), (10, 3000), (20, 4000)],
            id="flat run ends when the offset moves",
        ),
        pytest.param(
            [(10, 1000), (20, 2000), (30, 3000), (40, 4000)],
            3,
            [(20, 2000), (30, 3000), (40, 4000)],
            id="oldest point dropped at capacity",
        ),
        pytest.param(
            [(10, 1000), (20, 2000), (20, 3000), (20, 4000)],
            3,
            [(10, 1000), (20, 2000), (20, 4000)],
            id="flat run at capacity drops nothing",
        ),
    ],
)
def test_append_rules(
    appended: list[tuple[int, int]], capacity: int, expected: list[tuple[int, int]]
) -> None:
    assert pairs(table_of(*appended, capacity=capacity)) == expected


def test_append_returns_new_table_and_leaves_original_untouched() -> None:
    original = table_of((10, 1000))

    grown = original.append(20, 2000)

    assert pairs(original) == [(10, 1000)]
    assert pairs(grown) == [(10, 1000), (20, 2000)]
    assert grown.capacity == original.capacity


def test_rejected_append_returns_same_table() -> None:
    table = table_of((10, 1000))

    assert table.append(5, 2000) is table


def test_newest_and_length() -> None:
    assert OffsetTimeTable().newest is None
    assert len(OffsetTimeTable()) == 0
    table = table_of((10, 1000), (20, 2000))
    assert table.newest == OffsetPoint(20, 2000)
    assert len(table) == 2


@pytest.mark.parametrize(
    ("capacity", "points"),
    [
        pytest.param(1, (), id="capacity below two"),
        pytest.param(2, (OffsetPoint(1, 1), OffsetPoint(2, 2), OffsetPoint(3, 3)), id="overfull"),
        pytest.param(5, (OffsetPoint(1, 2), OffsetPoint(2, 1)), id="time goes backwards"),
        pytest.param(5, (OffsetPoint(2, 1), OffsetPoint(1, 2)), id="offset goes backwards"),
    ],
)
def test_invalid_table_rejected(capacity: int, points: tuple[OffsetPoint, ...]) -> None:
    with pytest.raises(ValueError, match="capacity|exceed|out of order"):
        OffsetTimeTable(capacity, points)


# A steady producer: 10 records per second, end offset 100 at t=10 s up to 200 at t=20 s.
STEADY = ((100, 10_000), (150, 15_000), (200, 20_000))


@pytest.mark.parametrize(
    ("points", "offset", "now_ms", "expected"),
    [
        pytest.param((), 0, 30_000, None, id="empty table is unknown"),
        pytest.param(((100, 10_000),), 50, 30_000, None, id="one point is unknown"),
        pytest.param(((100, 10_000),), 100, 30_000, 0.0, id="one point caught up is zero"),
        pytest.param(STEADY, 200, 30_000, 0.0, id="caught up with newest is zero"),
        pytest.param(STEADY, 250, 30_000, 0.0, id="ahead of newest is clamped to zero"),
        pytest.param(STEADY, 150, 30_000, 15.0, id="exactly on a point"),
        pytest.param(STEADY, 175, 30_000, 12.5, id="interpolated in newest segment"),
        pytest.param(STEADY, 120, 30_000, 18.0, id="interpolated in oldest segment"),
        pytest.param(STEADY, 100, 30_000, 20.0, id="exactly on oldest point"),
        pytest.param(STEADY, 50, 30_000, 25.0, id="extrapolated below the table"),
        pytest.param(STEADY, 0, 30_000, 30.0, id="extrapolated to offset zero"),
        pytest.param(STEADY, 175, 10_000, 0.0, id="prediction after now is clamped to zero"),
        pytest.param(STEADY, 175, 20_000, 2.5, id="now at newest point"),
    ],
)
def test_lag_seconds(
    points: tuple[tuple[int, int], ...], offset: int, now_ms: int, expected: float | None
) -> None:
    assert lag_seconds(table_of(*points), offset, now_ms) == pytest.approx(expected)


def test_extrapolation_uses_whole_table_trend_not_oldest_segment() -> None:
    # Oldest segment is steep (100 offsets/s), the table overall averages 20 offsets/s: the
    # exporter extrapolates with the oldest and newest points, so 5 s (not 1 s) before t=10 s.
    table = table_of((1000, 10_000), (1200, 12_000), (1400, 30_000))

    assert lag_seconds(table, 900, 30_000) == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("points", "offset", "expected"),
    [
        pytest.param(
            ((100, 10_000), (100, 14_000), (200, 24_000)),
            100,
            16.0,
            id="offset held over a flat run uses the run's last time",
        ),
        pytest.param(
            ((100, 10_000), (100, 14_000), (200, 24_000)),
            150,
            11.0,
            id="interpolated after a flat run",
        ),
        pytest.param(
            ((100, 10_000), (200, 20_000), (200, 28_000)),
            150,
            15.0,
            id="interpolated before a trailing flat run",
        ),
        pytest.param(
            ((100, 10_000), (100, 20_000)),
            50,
            20.0,
            id="below an all-flat table is the lower bound since the oldest point",
        ),
    ],
)
def test_lag_seconds_with_flat_runs(
    points: tuple[tuple[int, int], ...], offset: int, expected: float
) -> None:
    assert lag_seconds(table_of(*points), offset, 30_000) == pytest.approx(expected)


def test_lag_grows_with_now_when_position_is_fixed() -> None:
    table = table_of(*STEADY)

    assert lag_seconds(table, 150, 40_000) == pytest.approx(25.0)
    assert lag_seconds(table, 150, 50_000) == pytest.approx(35.0)


def test_rebuilt_table_answers_like_incrementally_built_one() -> None:
    incremental = OffsetTimeTable(4)
    for offset, ts in [(10, 1), (20, 2), (20, 3), (20, 4), (30, 5), (40, 6), (50, 7)]:
        incremental = incremental.append(offset, ts)

    rebuilt = OffsetTimeTable.from_points(incremental.points, 4)

    assert rebuilt == incremental
    assert pairs(rebuilt) == [(20, 4), (30, 5), (40, 6), (50, 7)]


def test_building_from_points_follows_the_append_rules():
    rng = random.Random(5)
    for _ in range(200):
        points, offset, ts = [], 0, 0
        for _ in range(rng.randrange(0, 90)):
            # flat runs, late and lagging reads, and growth, in random order
            offset = max(0, offset + rng.choice([0, 0, 0, 3, 50, -2]))
            ts += rng.choice([0, 1, 10_000, -5])
            points.append(OffsetPoint(offset, ts))
        appended = OffsetTimeTable(capacity=5 + rng.randrange(60))
        for point in points:
            appended = appended.append(point.offset, point.timestamp_ms)
        assert OffsetTimeTable.from_points(points, appended.capacity) == appended


def kept_by_the_rules(points: list[OffsetPoint], capacity: int) -> list[OffsetPoint]:
    """The rules point by point, as from_points applied them before they were inlined (the oracle)."""
    kept: list[OffsetPoint] = []
    for point in points:
        if kept:
            last = kept[-1]
            if point.timestamp_ms <= last.timestamp_ms or point.offset < last.offset:
                continue
            if len(kept) >= 2 and last.offset == point.offset == kept[-2].offset:
                kept[-1] = point
                continue
            if len(kept) == capacity:
                del kept[0]
        kept.append(point)
    return kept


def test_building_from_points_keeps_what_the_rules_keep_point_by_point():
    rng = random.Random(11)
    for _ in range(500):
        points, offset, ts = [], rng.randrange(0, 1 << 62), 0
        for _ in range(rng.randrange(0, 90)):
            offset = max(0, offset + rng.choice([0, 0, 0, 3, 50, -2, -(1 << 40)]))  # resets too
            ts += rng.choice([0, 1, 10_000, -5, -20_000])
            points.append(OffsetPoint(offset, ts))
        capacity = 2 + rng.randrange(62)
        table = OffsetTimeTable.from_points(iter(points), capacity)
        assert table.points == tuple(kept_by_the_rules(points, capacity))
        assert all(type(p) is OffsetPoint for p in table.points)
