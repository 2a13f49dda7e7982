"""Stored lag verdicts and their summary: the same evaluation as Burrow's rules run on the observations."""

from __future__ import annotations

import pytest

from contract.lag_evaluation import (
    EvaluationPolicy,
    OffsetObservation,
    evaluate,
    evaluate_partition,
    lookback_ms,
)
from contract.lag_verdicts import (
    evaluation_of_summary,
    evaluation_of_verdicts,
    summary_record,
    verdict_of,
    verdict_record,
)

POLICY = EvaluationPolicy.for_metrics_period(30_000)
LOOKBACK = lookback_ms(POLICY, 30_000)
T0 = 1_700_000_000_000


def history(lags: list[int], offsets: list[int] | None = None) -> list[OffsetObservation]:
    offsets = offsets or [100 * i for i in range(len(lags))]
    pairs = enumerate(zip(offsets, lags, strict=True))
    return [OffsetObservation(T0 + 30_000 * i, o, lag) for i, (o, lag) in pairs]


PARTITIONS = {
    ("orders", 0): history([5, 10, 15, 20, 25]),  # lag never decreased: WARN
    ("orders", 1): history([0, 0, 0, 0, 0]),  # caught up: OK
    ("payments", 0): history([40] * 5, [500] * 5),  # flat offset behind: STALL
}
NEWEST = T0 + 4 * 30_000


def verdicts(now_ms: int = NEWEST) -> list[dict]:
    return [verdict_record(evaluate_partition(obs, now_ms, policy=POLICY, key=key), NEWEST, POLICY, LOOKBACK,
                           1.5 * i) for i, (key, obs) in enumerate(PARTITIONS.items())]


def from_windows(now_ms: int):
    """What the service evaluates from the offset windows it reads at `now_ms` (its lookback's)."""
    seen = {k: [o for o in obs if now_ms - LOOKBACK <= o.ts_ms <= now_ms] for k, obs in PARTITIONS.items()}
    return evaluate({k: obs for k, obs in seen.items() if obs}, now_ms, policy=POLICY)


def test_a_verdict_reads_back_as_evaluated():
    p = evaluate_partition(PARTITIONS[("orders", 0)], NEWEST, policy=POLICY, key=("orders", 0))
    assert verdict_of(verdict_record(p, NEWEST, POLICY, LOOKBACK, None)) == p


@pytest.mark.parametrize("broken", [{}, {"topic": "t", "partition": "x"}, {"status": "BAD"}])
def test_a_broken_verdict_is_refused_naming_why(broken):
    record = {**verdicts()[0], **broken} if broken else {}
    with pytest.raises(ValueError, match="not a lag verdict"):
        verdict_of(record)


def test_the_summary_answers_as_the_rules_do_until_a_verdict_can_change():
    summary = summary_record(verdicts(), NEWEST + 500)
    expected = from_windows(NEWEST + 1_000)
    evaluation, seconds = evaluation_of_summary(summary, NEWEST + 1_000)
    assert (evaluation.status, evaluation.reason, evaluation.total_lag, evaluation.complete) == (
        expected.status, expected.reason, expected.total_lag, expected.complete)
    assert evaluation.partitions == expected.problems
    assert evaluation.max_lag_partition == expected.max_lag_partition
    assert seconds == 3.0
    # STOP: silence longer than the window's span (4 periods) and 3 periods; only lagging partitions.
    assert summary["valid_until_ms"] == NEWEST + 4 * 30_000 + 1
    assert evaluation_of_summary(summary, summary["valid_until_ms"]) is None


def test_a_summary_made_after_partitions_stopped_lists_them_as_stop():
    at = NEWEST + 200_000
    summary = summary_record(verdicts(), at)
    evaluation, _ = evaluation_of_summary(summary, at)
    assert evaluation.reason == "STOP" and evaluation.partitions == from_windows(at).problems
    # Next change: the oldest observation leaves the lookback.
    assert summary["valid_until_ms"] == T0 + LOOKBACK + 1


@pytest.mark.parametrize("now_ms", [NEWEST + 4 * 30_000, NEWEST + 4 * 30_000 + 1, NEWEST + 400_000,
                                    NEWEST + LOOKBACK + 1])
def test_aged_verdicts_are_the_rules_on_the_windows_at_that_moment(now_ms):
    """Until the oldest observation leaves the lookback (after that a verdict keeps its whole window, an
    approximation), and once the newest has left it too (NOTFOUND)."""
    evaluation, _ = evaluation_of_verdicts(verdicts(), now_ms)
    assert evaluation == from_windows(now_ms)


def test_no_verdicts_is_notfound():
    evaluation, seconds = evaluation_of_verdicts([], T0)
    assert (evaluation.status, evaluation.partitions, seconds) == ("NOTFOUND", (), None)
    assert summary_record([], T0)["partitions"] == 0
