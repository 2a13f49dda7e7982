"""The cost bound of one request: series x windows read ("points"), at most `service.max.points.per.request`.

A metric answer reads one stored window per series per window size step of its range, so its cost is the
series it merges times the windows in the range, whatever the answer's size after merging. A request over
the budget is refused before Redis is asked, with a 400 naming the limit and the coarser granularity that
would fit; `auto` picks the finest granularity that fits. A window size's range is clipped to its retention:
windows older than that do not exist, so `from=0` costs no more than the retention's worth.

The budget is per request (a context variable reset by the app before each request), so a resource that
reads many series in several calls (cluster-info, a Grafana query with many targets) is bounded as a whole.
Reads outside a request (tools, tests) get a budget per call.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

from contract import redis_layout as layout

DEFAULT_MAX_POINTS: Final = 200_000
SETTING: Final = "service.max.points.per.request"


class OverBudget(ValueError):
    """A read that would pass the request's point budget; the message names the limit and what fits."""


@dataclass
class PointBudget:
    limit: int
    spent: int = 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.spent)


_CURRENT: ContextVar[PointBudget | None] = ContextVar("srm_point_budget", default=None)


def start_request(limit: int) -> None:
    _CURRENT.set(PointBudget(limit))


def current(limit: int) -> PointBudget:
    return _CURRENT.get() or PointBudget(limit)


def windows_in(window: str, from_ms: int, to_ms: int, now_ms: int | None = None) -> int:
    """Stored windows of one series a read of [from_ms, to_ms] can meet at this window size."""
    size = layout.WINDOWS[window]
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    low = max(from_ms, now_ms - size.retention_ms - layout.TTL_SLACK_MS)
    if to_ms < low:
        return 0
    return (to_ms - low) // size.size_ms + 1


def cost(series: int, window: str, from_ms: int, to_ms: int) -> int:
    return series * windows_in(window, from_ms, to_ms)


def auto_window(budget: PointBudget, series: int, from_ms: int, to_ms: int) -> str:
    """The finest window giving at most layout.AUTO_MAX_POINTS points and fitting what is left of the
    budget; OverBudget when even the coarsest does not fit."""
    wanted = layout.auto_window(from_ms, to_ms)
    names = list(layout.WINDOWS)
    for name in names[names.index(wanted):]:
        if cost(series, name, from_ms, to_ms) <= budget.left:
            return name
    raise OverBudget(_refusal(budget, series, names[-1], from_ms, to_ms, None))


def charge(budget: PointBudget, series: int, window: str, from_ms: int, to_ms: int) -> None:
    """Spend the read's points, or refuse it naming the coarser granularity that fits."""
    points = cost(series, window, from_ms, to_ms)
    if points <= budget.left:
        budget.spent += points
        return
    names = list(layout.WINDOWS)
    coarser = names[names.index(window) + 1:]
    fits = next((n for n in coarser if cost(series, n, from_ms, to_ms) <= budget.left), None)
    raise OverBudget(_refusal(budget, series, window, from_ms, to_ms, fits))


def _refusal(budget: PointBudget, series: int, window: str, from_ms: int, to_ms: int,
             fits: str | None) -> str:
    points = cost(series, window, from_ms, to_ms)
    advice = (f"granularity={fits} fits" if fits is not None
              else "no granularity fits: narrow the time range or the series asked for")
    return (f"this request would read {series} series x {windows_in(window, from_ms, to_ms)} windows of "
            f"{window} = {points} points (with {budget.spent} already read), over the limit of "
            f"{budget.limit} points per request ({SETTING}); {advice}")
