"""The reader's guard around records from Kafka: caps, counts, skips, and logs at a bounded rate."""

from __future__ import annotations

import json
import logging

import pytest

from clients.record_guard import RecordGuard


class Record:
    """A stand-in for confluent_kafka.Message: the guard reads only these five methods."""

    def __init__(self, key: bytes | None, value: bytes | None, offset: int = 7) -> None:
        self._key, self._value, self._offset = key, value, offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def topic(self) -> str:
        return "heartbeats"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def test_guard_counts_and_skips_whatever_a_record_raises(caplog: pytest.LogCaptureFixture) -> None:
    guard = RecordGuard("test reader", max_key_bytes=16, max_value_bytes=64,
                        logger=logging.getLogger("guard-test"), log_every_s=3600)

    def parse(key: bytes | None, value: bytes | None) -> object:
        return json.loads(value or b"")  # the unguarded parser: RecursionError, ValueError, ...

    caplog.set_level(logging.WARNING, "guard-test")
    assert guard.read(Record(b"k", b"[1]"), parse) == [1]
    assert guard.read(Record(b"k", b"[" * 60, offset=8), parse) is None  # unbalanced: ValueError
    assert guard.read(Record(b"k", b"[" * 3000, offset=9), parse) is None  # over the cap
    assert guard.read(Record(b"k" * 17, b"[1]", offset=10), parse) is None
    assert guard.accepted == 1 and guard.rejected == 3
    assert "key of 17 bytes, more than the cap of 16" in (guard.last_rejection or "")
    # Rate limit: the first rejection is logged, the rest wait for the next minute.
    lines = [r.getMessage() for r in caplog.records if r.name == "guard-test"]
    assert len(lines) == 1 and "heartbeats[0]@8" in lines[0]
    assert guard.health() == {"reader": "test reader", "accepted": 1, "rejected": 3,
                              "last_rejection": guard.last_rejection}


def test_guard_logs_a_summary_once_the_period_passed(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    guard = RecordGuard("r", max_key_bytes=8, max_value_bytes=8, logger=logging.getLogger("guard-t2"),
                        log_every_s=60, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, "guard-t2")
    for offset in range(5):
        guard.read(Record(None, b"x" * 9, offset), lambda k, v: v)
    now[0] = 61.0
    guard.read(Record(None, b"y" * 9, 99), lambda k, v: v)
    lines = [r.getMessage() for r in caplog.records if r.name == "guard-t2"]
    assert len(lines) == 2
    assert "5 more record(s) skipped in the last 60 s; last heartbeats[0]@99" in lines[1]


def test_guard_lets_keyboard_interrupt_through() -> None:
    guard = RecordGuard("r", max_key_bytes=8, max_value_bytes=8)

    def interrupted(key: bytes | None, value: bytes | None) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        guard.read(Record(None, b"1"), interrupted)
