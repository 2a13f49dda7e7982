"""One reader's guard around the records it reads from Kafka: size-capped, parsed in a try, counted,
skipped, and logged at a bounded rate with the record's topic, partition and offset.

Whatever a record raises while it is parsed (``RecursionError`` from deep nesting included, which is no
``ValueError``) is that record's fault: it never ends a reader thread, fails a batch or blocks a
partition. The parsing rules themselves (``Rejected``, ``parse_json``) are ``contract.untrusted``'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from contract.untrusted import shown

T = TypeVar("T")

LOG_EVERY_S: Final = 60.0


class KafkaRecord(Protocol):
    """What the guard reads of a confluent_kafka.Message."""

    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...


@dataclass(frozen=True)
class RecordPlace:
    """Where a record came from, for the log line."""

    topic: str | None
    partition: int | None
    offset: int | None
    cluster: str | None = None

    @classmethod
    def of(cls, message: KafkaRecord, cluster: str | None = None) -> RecordPlace:
        return cls(message.topic(), message.partition(), message.offset(), cluster)

    def __str__(self) -> str:
        where = f"{self.topic}[{self.partition}]@{self.offset}"
        return f"{where} on {self.cluster}" if self.cluster else where


class RecordGuard:
    """One reader's guard: caps key and value sizes, parses in a try, counts, and logs at a bounded rate.

    ``read`` returns what ``parse`` made of the record, or None when the record was refused. Any
    ``Exception`` is by definition the record's fault; ``KeyboardInterrupt`` and ``SystemExit`` pass.
    """

    def __init__(self, reader: str, *, max_key_bytes: int, max_value_bytes: int,
                 logger: logging.Logger | None = None, log_every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.reader, self.max_key_bytes, self.max_value_bytes = reader, max_key_bytes, max_value_bytes
        self._log = logger or logging.getLogger(__name__)
        self._log_every_s, self._clock = log_every_s, clock
        self._lock = threading.Lock()
        self._accepted = 0
        self._rejected = 0
        self._last_rejection: str | None = None
        self._unlogged = 0
        self._logged_at: float | None = None

    @property
    def accepted(self) -> int:
        with self._lock:
            return self._accepted

    @property
    def rejected(self) -> int:
        with self._lock:
            return self._rejected

    @property
    def last_rejection(self) -> str | None:
        with self._lock:
            return self._last_rejection

    def read(self, message: KafkaRecord, parse: Callable[[bytes | None, bytes | None], T],
             cluster: str | None = None) -> T | None:
        key, value = message.key(), message.value()
        problem = self.oversize(key, value)
        if problem is None:
            try:
                result = parse(key, value)
            except Exception as exc:  # one record's fault, whatever it raised
                problem = f"{type(exc).__name__}: {exc}"
            else:
                with self._lock:
                    self._accepted += 1
                return result
        self.reject(RecordPlace.of(message, cluster), problem)
        return None

    def oversize(self, key: bytes | None, value: bytes | None) -> str | None:
        for part, data, cap in (("key", key, self.max_key_bytes), ("value", value, self.max_value_bytes)):
            if data is not None and len(data) > cap:
                return f"{part} of {len(data)} bytes, more than the cap of {cap}"
        return None

    def reject(self, place: RecordPlace | str, reason: str) -> None:
        """Counts a refused record (also for checks a reader makes after parsing) and logs it, the
        first at once, later ones at most one line per ``log_every_s``."""
        line = f"{place}: {shown(reason)}"
        now = self._clock()
        with self._lock:
            self._rejected += 1
            self._last_rejection = line
            logged_at = self._logged_at
            first = logged_at is None
            due = logged_at is None or now - logged_at >= self._log_every_s
            if due:
                unlogged, self._unlogged, self._logged_at = self._unlogged, 0, now
            else:
                self._unlogged += 1
        if not due:
            return
        if first or unlogged == 0:
            self._log.warning("%s: skipped %s", self.reader, line)
        else:
            self._log.warning("%s: %d more record(s) skipped in the last %.0f s; last %s", self.reader,
                              unlogged + 1, self._log_every_s, line)

    def health(self) -> dict[str, object]:
        with self._lock:
            return {"reader": self.reader, "accepted": self._accepted, "rejected": self._rejected,
                    "last_rejection": self._last_rejection}
