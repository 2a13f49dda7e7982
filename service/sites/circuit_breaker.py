"""Per-site circuit breaker and call slots: a site that keeps timing out is not called for a while.

A tarpit (a site that accepts the connection and then drips bytes) holds a gateway thread for its whole
deadline. The breaker stops calling a site after ``failures`` timeouts or connection failures in a row,
for ``open_s`` seconds, doubling while the site keeps failing (at most ``MAX_OPEN_S``); after that one
trial call goes through (half-open), and its success closes the breaker. ``max_waiting`` bounds the calls
to one site that are running or waiting for one of its threads (the gateway gives each site its own few).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

MAX_OPEN_S: Final = 300.0


@dataclass
class _SiteState:
    failures: int = 0
    open_until: float = 0.0
    open_s: float = 0.0
    trial: bool = False  # a half-open trial call is under way
    in_flight: int = 0


@dataclass(frozen=True)
class Admission:
    refused: str | None = None  # why the site is not called now; None: call it
    trial: bool = False  # the half-open trial call


@dataclass
class CircuitBreakers:
    """Thread-safe: ``admit(site)`` before a call, then, for an admitted call, exactly one
    ``done(site, admission, failed)``."""

    failures: int = 3
    open_s: float = 30.0
    max_waiting: int = 64
    clock: Callable[[], float] = time.monotonic
    _sites: dict[str, _SiteState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, site: str) -> Admission:
        with self._lock:
            state = self._sites.setdefault(site, _SiteState())
            now = self.clock()
            trial = state.failures >= self.failures
            if trial and (now < state.open_until or state.trial):
                wait = max(0.0, state.open_until - now)
                return Admission(f"not called: {state.failures} timeouts or connection failures in a row, "
                                 f"next try in {wait:.0f} s")
            if state.in_flight >= self.max_waiting:
                return Admission(f"not called: {state.in_flight} calls to this site are waiting already")
            state.in_flight += 1
            state.trial = state.trial or trial
            return Admission(None, trial)

    def done(self, site: str, admission: Admission, failed: bool) -> None:
        with self._lock:
            state = self._sites[site]
            state.in_flight -= 1
            if admission.trial:
                state.trial = False
            if not failed:
                state.failures, state.open_s, state.open_until = 0, 0.0, 0.0
                return
            state.failures += 1
            if admission.trial:  # the site is still failing: wait twice as long
                state.open_s = min(MAX_OPEN_S, state.open_s * 2)
                state.open_until = self.clock() + state.open_s
            elif state.failures == self.failures:  # just opened; stragglers of before change nothing
                state.open_s = self.open_s
                state.open_until = self.clock() + state.open_s

    def is_open(self, site: str) -> bool:
        with self._lock:
            state = self._sites.get(site)
            return state is not None and state.failures >= self.failures and self.clock() < state.open_until
