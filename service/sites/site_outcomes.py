"""How the gateway's calls to other sites ended, counted per site, for ``/metrics``.

A site that answers garbage, times out or is cut off by its circuit breaker turns into that site's
``error: …`` in one answer and a line in the log; these totals let an operator see it on a dashboard
and alert on it (``srm_gateway_site_answers``). They are per gunicorn worker process, like the request
counters: Prometheus sums them over the ``pid`` label.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Final

OUTCOMES: Final = ("ok", "timeout", "malformed", "not_called", "expired", "error")
# Statuses that mean the site did answer, but with something the gateway could not use.
_MALFORMED: Final = ("error: answer is not JSON", "error: answer nested deeper", "error: answer larger",
                     "error: answer has more than", "error: compressed answer")


def outcome_of(status: str, expired_status: str) -> str:
    """The class of one site's status in a fan-out answer (``gateway.SiteAnswer.status``)."""
    if status in ("ok", "timeout"):
        return status
    if status == expired_status:
        return "expired"
    if status.startswith(_MALFORMED):
        return "malformed"
    if status.startswith("error: not called") or status.endswith("not contacted"):
        return "not_called"
    return "error"


class SiteOutcomes:
    """Thread-safe running totals of (site, outcome). Sites are capped by the registry
    (``service.remote.max.sites``) and the configuration, so the label set stays small."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._dropped: Counter[str] = Counter()

    def count(self, site: str, outcome: str) -> None:
        with self._lock:
            self._counts[(site, outcome)] += 1

    def dropped_frames(self, site: str, frames: int) -> None:
        """Grafana frames of an ``ok`` answer that were not what the datasource documents, so left out."""
        with self._lock:
            self._dropped[site] += frames

    def totals(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def dropped_totals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)
