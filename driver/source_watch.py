"""Notices when the source cluster stops answering the replication's consumer, and when it is back.

librdkafka reconnects on its own and the consumer simply returns nothing while every broker is down,
which looks the same as idle topics. Its error callback tells the difference: a transport error or
"all brokers down" marks the source as suspect, and a metadata request (bounded, at most every
``PROBE_INTERVAL_S``) confirms it before the replication reports the outage. Records arriving, or a
metadata answer, end it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import KafkaError, KafkaException

PROBE_INTERVAL_S: Final = 2.0
PROBE_TIMEOUT_S: Final = 1.0
_UNREACHABLE: Final = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE})


class SourceWatch:
    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._lock = threading.Lock()
        self._suspect_since: float | None = None
        self._error = ""
        self._next_probe = 0.0
        self._confirmed = False

    def on_error(self, error: KafkaError) -> None:
        """Fed by the consumer's ``error_cb`` (librdkafka logs the connection failures itself)."""
        if error.code() in _UNREACHABLE:
            with self._lock:
                if self._suspect_since is None:
                    self._suspect_since = time.monotonic()
                self._error = error.str()

    def records_arrived(self) -> None:
        if self._suspect_since is not None:
            with self._lock:
                self._suspect_since, self._confirmed = None, False

    @property
    def suspect(self) -> bool:
        return self._suspect_since is not None

    def outage(self, probe: Callable[[float], object], now: float | None = None) -> str | None:
        """The reason to report while the source is unreachable, else None. ``probe(timeout_s)`` is a
        metadata request that raises KafkaException when no broker answers."""
        since = self._suspect_since
        if since is None:
            return None
        now = time.monotonic() if now is None else now
        if now >= self._next_probe:
            self._next_probe = now + PROBE_INTERVAL_S
            try:
                probe(PROBE_TIMEOUT_S)
            except KafkaException as exc:
                self._confirmed = True
                self._error = str(exc.args[0].str() if exc.args else exc)
            else:
                with self._lock:
                    self._suspect_since, self._confirmed = None, False
                return None
        if not self._confirmed:
            return None
        return f"source cluster {self.alias!r} unreachable for {now - since:.0f} s: {self._error}"

