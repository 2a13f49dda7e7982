"""Lag verdicts judged in a child process (verdict_child.BackgroundVerdicts) leave Redis as a sink judging
them in its own process does, batch after batch; also after a batch that failed half-way (the child's
history and verdicts are dropped, the batch is written again as Spark replays it) and after the child was
killed (a new one reads Redis again)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator

import pytest
from streaming_input import snapshot
from test_history_pruning import batches, kafka_batch, write_through

from aggregator import redis_sink, verdict_child
from aggregator.redis_sink import RedisRollupSink
from contract import redis_layout as layout

pytestmark = pytest.mark.integration


# Databases of the shared Redis no other test uses (tests/e2e/test_multi_site.py takes 11-14, and others
# 2-5 and 7): what these tests write would show in another's answers.
DBS = (8, 9)


@pytest.fixture
def sinks(redis_url: str) -> Iterator[tuple[RedisRollupSink, RedisRollupSink]]:
    """(background, inline): one query's sinks on emptied databases of one real Redis, emptied after."""
    base = redis_url.rsplit("/", 1)[0]
    name = f"judged_{uuid.uuid4().hex[:8]}"
    background = RedisRollupSink(f"{base}/{DBS[0]}", name, 600_000, "west", judge_in_background=True)
    inline = RedisRollupSink(f"{base}/{DBS[1]}", name, 600_000, "west")
    for sink in (background, inline):
        sink.bind("q").client.flushdb()
    yield background, inline
    background.close()
    for sink in (background, inline):
        sink.client.flushdb()


def verdict_keys(sink: RedisRollupSink) -> int:
    return sink.client.hlen(layout.lag_verdicts_key("west", "east"))


@pytest.mark.parametrize("seed", range(4))
def test_verdicts_judged_in_a_child_are_those_judged_in_the_sink(
        sinks: tuple[RedisRollupSink, RedisRollupSink], seed: int, monkeypatch: pytest.MonkeyPatch):
    background, inline = sinks
    offsets = {0: 0, 1: 0}
    for batch_id, records in enumerate(batches(seed)):
        now = max(r.ts for _, r in records) + 2_000
        monkeypatch.setattr(redis_sink, "_now_ms", lambda now=now: now)  # one clock for both sinks
        parts = kafka_batch(records, offsets)
        for sink in (background, inline):
            write_through(sink, parts, batch_id, now)
        assert snapshot(background.client) == snapshot(inline.client)
    assert isinstance(background.judging, verdict_child.BackgroundVerdicts)
    assert verdict_keys(background) > 0  # verdicts were written: the comparison is worth it


# Where the batch fails: before the child said whether it reads Redis, or with its partials merged.
@pytest.mark.parametrize("fails_in", ["_replication_records", "_write_latest"])
def test_a_batch_failed_after_its_verdicts_began_is_written_again_as_if_it_had_not(
        sinks: tuple[RedisRollupSink, RedisRollupSink], fails_in: str, monkeypatch: pytest.MonkeyPatch):
    background, inline = sinks
    offsets = {0: 0, 1: 0}
    works = getattr(RedisRollupSink, fails_in)
    for batch_id, records in enumerate(batches(3, count=6)):
        now = max(r.ts for _, r in records) + 2_000
        monkeypatch.setattr(redis_sink, "_now_ms", lambda now=now: now)
        parts = kafka_batch(records, offsets)
        if batch_id in (2, 4):
            monkeypatch.setattr(RedisRollupSink, fails_in, failing)
            with pytest.raises(ConnectionError):
                write_through(background, parts, batch_id, now)
            monkeypatch.setattr(RedisRollupSink, fails_in, works)
        for sink in (background, inline):  # the replay, and the batch once
            write_through(sink, parts, batch_id, now)
        assert snapshot(background.client) == snapshot(inline.client)


def test_a_killed_child_is_replaced_and_the_next_batch_reads_redis_again(
        sinks: tuple[RedisRollupSink, RedisRollupSink], monkeypatch: pytest.MonkeyPatch):
    background, inline = sinks
    offsets = {0: 0, 1: 0}
    killed = []
    for batch_id, records in enumerate(batches(5, count=6)):
        now = max(r.ts for _, r in records) + 2_000
        monkeypatch.setattr(redis_sink, "_now_ms", lambda now=now: now)
        parts = kafka_batch(records, offsets)
        if batch_id == 3:
            child = background.judging
            assert isinstance(child, verdict_child.BackgroundVerdicts)
            os.kill(child._process.pid, signal.SIGKILL)
            child._process.join(10)
            killed.append(child)
        for sink in (background, inline):
            write_through(sink, parts, batch_id, now)
        assert snapshot(background.client) == snapshot(inline.client)
    assert killed and background.judging is not killed[0]


def failing(self: RedisRollupSink, *args: object) -> None:
    raise ConnectionError("Redis went away")
