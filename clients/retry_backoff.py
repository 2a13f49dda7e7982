"""Exponential back-off for a task that keeps failing, with one log line per step.

The first failure, and every change of reason, is one ERROR that names the reason and the wait; each
later step is one WARNING. Success resets the wait and says so once. So a cluster that refuses our
credentials for an hour costs a few dozen lines, not thousands.
"""

from __future__ import annotations

import logging
import threading
from typing import Final

FIRST_WAIT_S: Final = 10.0
MAX_WAIT_S: Final = 300.0
MAX_REASON_CHARS: Final = 300


class RetryBackoff:
    def __init__(self, what: str, logger: logging.Logger, first_s: float = FIRST_WAIT_S,
                 max_s: float = MAX_WAIT_S) -> None:
        self.what, self.logger, self.first_s, self.max_s = what, logger, first_s, max_s
        self.failures = 0
        self.reason: str | None = None
        self._next_s = first_s

    def failed(self, reason: str) -> float:
        """Logs the failure (one line) and returns how long to wait before the next attempt."""
        reason = reason[:MAX_REASON_CHARS]
        wait_s = self._next_s
        if reason != self.reason:
            self.logger.error("%s; %s retries in %.0f s", reason, self.what, wait_s)
        else:
            self.logger.warning("%s still failing (%s); retrying in %.0f s", self.what, reason, wait_s)
        self.failures += 1
        self.reason = reason
        self._next_s = min(self.max_s, wait_s * 2)
        return wait_s

    def wait(self, reason: str, stopping: threading.Event) -> None:
        """``failed`` and then the wait, cut short when ``stopping`` is set."""
        stopping.wait(self.failed(reason))

    def succeeded(self) -> None:
        if self.failures:
            self.logger.info("%s works again after %d failed attempt(s)", self.what, self.failures)
        self.failures, self.reason, self._next_s = 0, None, self.first_s
