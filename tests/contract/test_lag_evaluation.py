"""Burrow-style evaluation: partition rules in Burrow's order and the worst-partition-wins roll-up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.lag_evaluation import (
    DEFAULT_POLICY,
    Evaluation,
    EvaluationPolicy,
    OffsetObservation,
    PartitionKey,
    Reason,
    Status,
    evaluate,
    evaluate_partition,
    evaluate_windows,
    observations,
)
from contract.redis_layout import WindowAggregate

S = 1000  # the tables below read in seconds


def window(*samples: tuple[int, int, int]) -> list[OffsetObservation]:
    """Observations from (seconds, offset, lag) triples."""
    return [OffsetObservation(ts_s * S, offset, lag) for ts_s, offset, lag in samples]


# Default policy: 10 intervals, allowed lag 0, STOP and STALL floors of 90 s.
PARTITION_CASES = [
    pytest.param([], 100, None, Reason.OK, id="no observations"),
    pytest.param(
        window((0, 100, 5), (30, 90, 0)), 1000, None, Reason.OK, id="current lag zero beats everything"
    ),
    pytest.param(window((0, 100, 5), (30, 100, 5)), 1000, 0, Reason.OK, id="caller's current lag zero wins"),
    pytest.param(
        window((0, 100, 5), (30, 110, 5), (60, 120, 5)), 200, None, Reason.STOP, id="stop: silence > span"
    ),
    pytest.param(
        window(*[(30 * i, 100 + 10 * i, 50 - i) for i in range(10)]),
        400,
        None,
        Reason.OK,
        id="no stop: silence 130 s within span 270 s",
    ),
    pytest.param(window((0, 100, 5)), 60, None, Reason.WARN, id="no stop: one sample, silence under floor"),
    pytest.param(window((0, 100, 5)), 91, None, Reason.STOP, id="stop: one sample, silence over floor"),
    pytest.param(
        window((0, 100, 0), (30, 100, 0), (60, 110, 5)),
        300,
        None,
        Reason.STOP,
        id="stop is checked before lag-was-zero",
    ),
    pytest.param(
        window((0, 100, 0), (30, 100, 0)), 300, 50, Reason.STOP, id="stop seen through caller's current lag"
    ),
    pytest.param(
        window((0, 100, 50), (30, 200, 40), (60, 150, 90), (90, 160, 80)),
        90,
        None,
        Reason.REWIND,
        id="rewind never recovered",
    ),
    pytest.param(
        window((0, 100, 50), (30, 200, 40), (60, 190, 50)),
        60,
        None,
        Reason.REWIND,
        id="rewind at newest observation",
    ),
    pytest.param(
        window((0, 100, 50), (30, 200, 40), (60, 150, 90), (90, 210, 30)),
        90,
        None,
        Reason.OK,
        id="rewind recovered is forgiven",
    ),
    pytest.param(
        window((0, 200, 0), (30, 50, 150), (60, 60, 140)),
        60,
        None,
        Reason.REWIND,
        id="rewind is checked before lag-was-zero",
    ),
    pytest.param(
        window((0, 200, 10), (30, 150, 60)), 300, None, Reason.STOP, id="stop is checked before rewind"
    ),
    pytest.param(
        window((0, 100, 0), (30, 110, 5), (60, 120, 10)), 60, None, Reason.OK, id="lag zero once is ok"
    ),
    pytest.param(
        window((0, 100, 5), (30, 100, 8), (60, 100, 9), (90, 100, 12)),
        95,
        None,
        Reason.STALL,
        id="stall: one offset over 90 s with lag",
    ),
    pytest.param(window((0, 100, 5), (30, 100, 8)), 35, None, Reason.WARN, id="flat for 30 s is only warn"),
    pytest.param(
        window((0, 100, 10), (30, 200, 10), (60, 300, 20)), 60, None, Reason.WARN, id="warn: lag never fell"
    ),
    pytest.param(
        window((0, 100, 10), (30, 200, 20), (60, 300, 15)), 60, None, Reason.OK, id="ok: lag fell once"
    ),
    pytest.param(
        window((60, 300, 20), (0, 100, 10), (30, 200, 30)),
        60,
        None,
        Reason.OK,
        id="unsorted input is put in time order",
    ),
    pytest.param(window((0, 100, 5)), 10, -3, Reason.OK, id="negative current lag clamped to caught up"),
]


@pytest.mark.parametrize(("observations", "now_s", "current_lag", "expected"), PARTITION_CASES)
def test_partition_rules(
    observations: list[OffsetObservation], now_s: int, current_lag: int | None, expected: Reason
) -> None:
    result = evaluate_partition(observations, now_s * S, current_lag=current_lag)

    assert result.reason is expected


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        (Reason.OK, Status.OK),
        (Reason.WARN, Status.WARN),
        (Reason.STOP, Status.ERR),
        (Reason.STALL, Status.ERR),
        (Reason.REWIND, Status.ERR),
    ],
)
def test_partition_status_is_burrow_group_level_of_reason(reason: Reason, status: Status) -> None:
    case: Sequence[Any] = next(p.values for p in PARTITION_CASES if p.values[3] is reason)
    observations, now_s, current_lag, _ = case

    result = evaluate_partition(observations, now_s * S, current_lag=current_lag)

    assert (result.reason, result.status) == (reason, status)


def test_status_strings_are_burrow_names() -> None:
    assert [str(s) for s in Status] == ["NOTFOUND", "OK", "WARN", "ERR"]
    assert [str(r) for r in Reason] == ["NOTFOUND", "OK", "WARN", "STOP", "STALL", "REWIND"]


def test_partition_fields() -> None:
    observations = window((0, 100, 10), (30, 200, 20), (60, 300, 30))

    result = evaluate_partition(observations, 60 * S, key=("orders", 3))

    assert (result.topic, result.partition) == ("orders", 3)
    assert result.current_lag == 30
    assert result.complete == pytest.approx(0.3)
    assert result.start == observations[0]
    assert result.end == observations[-1]


def test_empty_partition_fields() -> None:
    result = evaluate_partition([], 0)

    assert (result.status, result.complete, result.current_lag) == (Status.OK, 0.0, 0)
    assert result.start is None and result.end is None


def test_window_keeps_only_newest_intervals() -> None:
    # The zero lag at t=0 s has aged out of a 3-interval window, so nothing excuses the growing lag.
    observations = window((0, 100, 0), (30, 150, 5), (60, 200, 10), (90, 250, 10), (120, 300, 20))
    policy = EvaluationPolicy(intervals=3)

    result = evaluate_partition(observations, 120 * S, policy=policy)

    assert result.reason is Reason.WARN
    assert result.complete == 1.0
    assert result.start == observations[2]


@pytest.mark.parametrize(
    ("allowed_lag", "expected"),
    [
        pytest.param(0, Reason.WARN, id="default: any lag counts"),
        pytest.param(9, Reason.OK, id="lag within allowance at one sample"),
        pytest.param(20, Reason.OK, id="current lag within allowance"),
    ],
)
def test_allowed_lag(allowed_lag: int, expected: Reason) -> None:
    observations = window((0, 100, 5), (30, 200, 10), (60, 300, 20))

    result = evaluate_partition(observations, 60 * S, policy=EvaluationPolicy(allowed_lag=allowed_lag))

    assert result.reason is expected


def test_policy_for_metrics_period_scales_floors() -> None:
    # At the demo's 5 s period a partition flat for 15 s is already stalled.
    policy = EvaluationPolicy.for_metrics_period(5 * S)
    observations = window((0, 100, 5), (5, 100, 6), (10, 100, 7), (15, 100, 8))

    assert (policy.stall_after_ms, policy.stop_after_ms) == (15 * S, 15 * S)
    assert evaluate_partition(observations, 15 * S, policy=policy).reason is Reason.STALL
    assert evaluate_partition(observations, 15 * S).reason is Reason.WARN
    assert evaluate_partition(window((0, 100, 5)), 16 * S, policy=policy).reason is Reason.STOP


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"intervals": 0}, id="no intervals"),
        pytest.param({"allowed_lag": -1}, id="negative allowed lag"),
    ],
)
def test_invalid_policy_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must"):
        EvaluationPolicy(**kwargs)


def test_policy_rejects_non_positive_period() -> None:
    with pytest.raises(ValueError, match="positive"):
        EvaluationPolicy.for_metrics_period(0)


# Group windows, evaluated at t=95 s: each one yields the reason in its name.
GROUP_WINDOWS: dict[Reason, list[OffsetObservation]] = {
    Reason.OK: window((0, 100, 10), (30, 200, 0), (90, 300, 0)),
    Reason.WARN: window((60, 100, 10), (90, 200, 20)),
    Reason.STOP: window((0, 100, 10), (1, 110, 10)),
    Reason.STALL: window((0, 100, 5), (90, 100, 9)),
    Reason.REWIND: window((60, 200, 10), (90, 150, 60)),
}


def group(*reasons: Reason) -> dict[PartitionKey, list[OffsetObservation]]:
    return {("t", i): GROUP_WINDOWS[r] for i, r in enumerate(reasons)}


def test_group_windows_yield_their_reason() -> None:
    for reason, observed in GROUP_WINDOWS.items():
        assert evaluate_partition(observed, 95 * S).reason is reason


@pytest.mark.parametrize(
    ("reasons", "status", "reason"),
    [
        pytest.param((Reason.OK, Reason.OK), Status.OK, Reason.OK, id="all ok"),
        pytest.param((Reason.OK, Reason.WARN), Status.WARN, Reason.WARN, id="warn beats ok"),
        pytest.param((Reason.WARN, Reason.STOP, Reason.OK), Status.ERR, Reason.STOP, id="stop is err"),
        pytest.param((Reason.STOP, Reason.STALL), Status.ERR, Reason.STALL, id="stall beats stop"),
        pytest.param(
            (Reason.REWIND, Reason.STALL, Reason.STOP), Status.ERR, Reason.REWIND, id="rewind beats all"
        ),
    ],
)
def test_worst_partition_wins(reasons: tuple[Reason, ...], status: Status, reason: Reason) -> None:
    result = evaluate(group(*reasons), 95 * S)

    assert (result.status, result.reason) == (status, reason)


def test_not_found_when_no_partitions() -> None:
    assert evaluate({}, 0) == Evaluation(Status.NOTFOUND, (), None, 0, Reason.NOTFOUND)


def test_partitions_without_observations_are_ok() -> None:
    result = evaluate({("t", 0): [], ("t", 1): []}, 0)

    assert (result.status, result.reason, result.total_lag, result.complete) == (
        Status.OK,
        Reason.OK,
        0,
        0.0,
    )


def test_group_totals_and_max_lag() -> None:
    result = evaluate(group(Reason.OK, Reason.WARN, Reason.REWIND), 95 * S)

    assert [(p.topic, p.partition, p.current_lag) for p in result.partitions] == [
        ("t", 0, 0),
        ("t", 1, 20),
        ("t", 2, 60),
    ]
    assert result.total_lag == 80
    assert result.max_lag_partition is not None
    assert result.max_lag_partition.partition == 2
    assert [p.partition for p in result.problems] == [1, 2]


def test_group_partitions_sorted_by_topic_then_partition() -> None:
    observations = window((90, 100, 0))
    result = evaluate({("b", 0): observations, ("a", 1): observations, ("a", 0): observations}, 95 * S)

    assert [(p.topic, p.partition) for p in result.partitions] == [("a", 0), ("a", 1), ("b", 0)]


def test_group_complete_is_share_of_full_windows() -> None:
    full = window(*[(9 * i, 100 + i, 0) for i in range(10)])
    partial = window((90, 100, 0))

    result = evaluate({("t", 0): full, ("t", 1): partial}, 95 * S)

    assert result.complete == 0.5
    assert [p.complete for p in result.partitions] == [1.0, 0.1]


def test_group_current_lags_override_per_partition() -> None:
    # Partition 0 reported lag 0 long ago, but its end offset has moved on since: STOP, as Burrow
    # does with current_lag; partition 1 has no override and stays OK.
    stale = window((0, 100, 0), (30, 100, 0))
    result = evaluate({("t", 0): stale, ("t", 1): stale}, 300 * S, current_lags={("t", 0): 40})

    assert [p.reason for p in result.partitions] == [Reason.STOP, Reason.OK]
    assert result.total_lag == 40
    assert result.status is Status.ERR


def test_group_policy_is_applied_to_every_partition() -> None:
    result = evaluate(group(Reason.WARN, Reason.WARN), 95 * S, policy=EvaluationPolicy(allowed_lag=100))

    assert result.status is Status.OK
    assert DEFAULT_POLICY.allowed_lag == 0


# --- the rules on lists of numbers, against their plain reading over observations ---------------------

def _plain_reason(window: list[OffsetObservation], current_lag: int, now_ms: int,
                  policy: EvaluationPolicy) -> Reason:
    """The rules as the module docstring states them, one observation at a time (the oracle)."""
    allowed = policy.allowed_lag
    if not window or current_lag <= allowed:
        return Reason.OK
    silence = now_ms - window[-1].ts_ms
    if silence > window[-1].ts_ms - window[0].ts_ms and silence > policy.stop_after_ms:
        return Reason.STOP
    if any(all(o.offset < window[i - 1].offset for o in window[i:]) for i in range(1, len(window))):
        return Reason.REWIND
    if any(o.lag <= allowed for o in window):
        return Reason.OK
    if all(o.offset == window[0].offset for o in window) and \
            window[-1].ts_ms - window[0].ts_ms >= policy.stall_after_ms:
        return Reason.STALL
    if all(b.lag >= a.lag for a, b in zip(window, window[1:], strict=False)):
        return Reason.WARN
    return Reason.OK


_samples = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 6), st.integers(-1, 4)), max_size=14,
                    unique_by=lambda s: s[0])


@settings(max_examples=500, deadline=None)
@given(samples=_samples, now_s=st.integers(0, 120), current=st.one_of(st.none(), st.integers(-1, 4)),
       allowed=st.integers(0, 2), floors_s=st.integers(0, 60), intervals=st.integers(1, 12),
       lags_missing=st.sets(st.integers(0, 40)))
def test_the_rules_on_lists_and_on_windows_give_the_plain_reading(samples, now_s, current, allowed, floors_s,
                                                                  intervals, lags_missing):
    policy = EvaluationPolicy(intervals, allowed, floors_s * S, floors_s * S)
    observed = sorted(window(*samples), key=lambda o: o.ts_ms)
    newest = observed[-intervals:]
    lag_now = max(0, newest[-1].lag if current is None and newest else current or 0)
    expected = _plain_reason(newest, lag_now, now_s * S, policy)
    judged = evaluate_partition(observed[::-1], now_s * S, policy=policy, current_lag=current, key=("t", 1))
    assert (judged.reason, judged.current_lag, judged.start, judged.end) == (
        expected, lag_now, newest[0] if newest else None, newest[-1] if newest else None)
    # From windows: an offset window's last is the offset; the lag window of the same start its lag (0
    # when there is none, as `observations` reads it).
    offsets = [WindowAggregate(o.ts_ms, 1, o.offset, o.offset, o.offset, o.offset) for o in observed]
    lags = [WindowAggregate(o.ts_ms, 1, o.lag, o.lag, o.lag, o.lag) for o in observed
            if o.ts_ms // S not in lags_missing]
    judge = {"policy": policy, "current_lag": current, "key": ("t", 1)}
    assert evaluate_windows(offsets, lags, now_s * S, **judge) == evaluate_partition(
        observations(offsets, lags), now_s * S, **judge)
