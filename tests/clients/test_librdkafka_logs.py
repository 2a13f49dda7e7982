"""librdkafka's lines reach Python logging under librdkafka.<alias>, and repeats are held back."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from confluent_kafka import Producer

from clients.librdkafka_logs import RepeatLimiter, client_log_settings


def record(name: str, message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "%s [%s] %s", ("FAIL", "rdkafka#producer-1", message),
                             None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_repeat_within_the_interval_is_held_back_and_summarised_with_the_next_one() -> None:
    clock = Clock()
    limiter = RepeatLimiter(interval_s=60, clock=clock)
    assert limiter.filter(record("librdkafka.east", "Connect to ipv4#127.0.0.1:1 failed (after 0ms)"))
    passed = [limiter.filter(record("librdkafka.east", f"Connect to ipv4#127.0.0.1:1 failed (after {n}ms)"))
              for n in range(50)]
    assert not any(passed)
    clock.now += 61
    summary = record("librdkafka.east", "Connect to ipv4#127.0.0.1:1 failed (after 3ms)")
    assert limiter.filter(summary)
    assert summary.getMessage().endswith("(50 more like it in the last 61 s not shown)")


def test_other_clusters_levels_and_texts_are_not_held_back_by_each_other() -> None:
    limiter = RepeatLimiter(interval_s=60, clock=Clock())
    assert limiter.filter(record("librdkafka.east", "Connection refused"))
    assert limiter.filter(record("librdkafka.west", "Connection refused"))
    assert limiter.filter(record("librdkafka.east", "Connection refused", logging.WARNING))
    assert limiter.filter(record("librdkafka.east", "SASL authentication error"))
    assert not limiter.filter(record("librdkafka.east", "Connection refused"))


def test_the_oldest_shape_is_forgotten_beyond_the_cap() -> None:
    limiter = RepeatLimiter(interval_s=60, clock=Clock(), max_shapes=2)
    for text in ("a", "b", "c"):
        assert limiter.filter(record("librdkafka.east", text))
    assert limiter.filter(record("librdkafka.east", "a"))  # forgotten, so shown again
    assert not limiter.filter(record("librdkafka.east", "c"))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_client_against_a_closed_port_logs_through_python_once(
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{closed_port()}"
    producer = Producer({"bootstrap.servers": address, "reconnect.backoff.ms": 10,
                         "reconnect.backoff.max.ms": 50, **client_log_settings("nowhere")})
    with caplog.at_level(logging.DEBUG, logger="librdkafka.nowhere"):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            producer.poll(0.1)
    del producer
    lines = [r for r in caplog.records if r.name == "librdkafka.nowhere"]
    assert lines, "librdkafka's lines did not reach Python logging"
    assert any("Connection refused" in r.getMessage() for r in lines)
    # Dozens of reconnects in 3 s; each distinct line shape is shown once.
    assert len(lines) <= 5, [r.getMessage() for r in lines]
    # Nothing written by librdkafka itself about this client. Other tests' clients in this process (their
    # clusters stopped) may write to the same stderr, so only this client's address is looked for.
    assert address not in capfd.readouterr().err
