"""The per-site circuit breaker and call slots, on a clock the test moves."""

from __future__ import annotations

from service.sites.circuit_breaker import MAX_OPEN_S, CircuitBreakers


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(breakers: CircuitBreakers, site: str = "east") -> None:
    admission = breakers.admit(site)
    assert admission.refused is None
    breakers.done(site, admission, failed=True)


def test_a_site_failing_in_a_row_is_not_called_then_tried_once_then_closed_again():
    clock = Clock()
    breakers = CircuitBreakers(failures=3, open_s=30.0, clock=clock)
    for _ in range(3):
        fail(breakers)
    refused = breakers.admit("east").refused
    assert refused == "not called: 3 timeouts or connection failures in a row, next try in 30 s"
    assert breakers.admit("west").refused is None  # other sites are not concerned
    clock.now += 30
    trial = breakers.admit("east")
    assert trial.refused is None and trial.trial
    assert breakers.admit("east").refused is not None  # one trial at a time
    breakers.done("east", trial, failed=False)
    assert not breakers.is_open("east")
    assert breakers.admit("east").refused is None


def test_the_pause_doubles_while_the_trials_fail_up_to_five_minutes():
    clock = Clock()
    breakers = CircuitBreakers(failures=2, open_s=30.0, clock=clock)
    fail(breakers)
    fail(breakers)
    pauses = []
    for _ in range(6):
        started = clock.now
        while breakers.is_open("east"):
            clock.now += 1
        pauses.append(clock.now - started)
        fail(breakers)  # the half-open trial fails
    assert pauses == [30, 60, 120, 240, MAX_OPEN_S, MAX_OPEN_S]


def test_failures_of_calls_started_before_the_breaker_opened_do_not_lengthen_the_pause():
    clock = Clock()
    breakers = CircuitBreakers(failures=2, open_s=30.0, clock=clock)
    admissions = [breakers.admit("east") for _ in range(4)]
    for admission in admissions:
        breakers.done("east", admission, failed=True)
    clock.now += 30
    assert breakers.admit("east").refused is None


def test_no_more_than_max_waiting_calls_per_site():
    breakers = CircuitBreakers(max_waiting=2)
    first, second = breakers.admit("east"), breakers.admit("east")
    assert breakers.admit("east").refused == "not called: 2 calls to this site are waiting already"
    breakers.done("east", first, failed=False)
    assert breakers.admit("east").refused is None
    assert second.refused is None
