"""Records and answers from outside, read under a guard: size-capped, parsed in a try, counted, skipped.

Anyone with Produce rights on a topic we read, and anything that answers at a remote site's address,
can send us whatever bytes they like. A record is one record's problem: whatever it raises while it is
parsed (``RecursionError`` from deep nesting included, which is no ``ValueError``) is counted, logged
with its topic, partition and offset at a bounded rate, and skipped. It never ends a reader thread,
fails a batch or blocks a partition.

JSON from outside is parsed with orjson: its depth limit (1024) is a ``JSONDecodeError``, not a
``RecursionError``; it refuses ``NaN``, ``Infinity`` and ``1e400``; and whatever it parses serialises
again (integers beyond 64 bits come back as floats).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import orjson

T = TypeVar("T")

LOG_EVERY_S: Final = 60.0
SHOWN_CHARS: Final = 120


class Rejected(ValueError):
    """A record or answer refused on purpose; the message names what is wrong."""


def parse_json(raw: bytes | bytearray | memoryview | str | None, what: str) -> Any:
    """The JSON document in ``raw``, or ``Rejected`` naming ``what`` (missing, not UTF-8, nested deeper
    than 1024, NaN/Infinity, a number out of range, trailing bytes)."""
    if raw is None:
        raise Rejected(f"{what} is missing (null)")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Rejected(f"{what} is not JSON: {exc}") from None


def finite(value: object, what: str, low: float = -math.inf, high: float = math.inf) -> float:
    """``value`` as a float when it is a finite number in [low, high]; else ``Rejected`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected(f"{what} must be a number, not {shown(repr(value), 40)}")
    number = float(value) if isinstance(value, float) or abs(value) < 2**1023 else math.inf
    if not math.isfinite(number) or not low <= number <= high:
        raise Rejected(f"{what} {shown(repr(value), 40)} is not a finite number between {low:g} and {high:g}")
    return number


def long(value: object, what: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    """``value`` when it is an integer (not a bool) in [low, high]; else ``Rejected`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Rejected(f"{what} must be an integer, not {shown(repr(value), 40)}")
    if not low <= value <= high:
        raise Rejected(f"{what} {shown(repr(value), 40)} is not between {low} and {high}")
    return value


def shown(text: str | bytes | bytearray | None, limit: int = SHOWN_CHARS) -> str:
    """``text`` fit for one log line: control characters and newlines escaped, cut at ``limit``
    characters, so data from outside can neither forge log lines nor flood them."""
    if text is None:
        return "null"
    if isinstance(text, bytes | bytearray):
        text = bytes(text[: limit * 4]).decode("utf-8", "backslashreplace")
    cut = text[:limit]
    escaped = "".join(c if c.isprintable() and c not in "\\" else _escape(c) for c in cut)
    return escaped + ("…" if len(text) > limit else "")


def _escape(char: str) -> str:
    if char == "\\":
        return "\\\\"
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}" if ord(char) < 65536
        else f"\\U{ord(char):08x}")


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
            except Exception as exc:  # noqa: BLE001 - one record's fault, whatever it raised
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
            first = self._logged_at is None
            due = first or now - self._logged_at >= self._log_every_s  # type: ignore[operator]
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
