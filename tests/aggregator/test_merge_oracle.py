"""The merge on numpy (window_ids, stored_windows, numbered_partials) leaves Redis byte for byte as the
merge on Acero joins did (merge_oracle): the same generated batches merged by both into two databases of
one real Redis, with batches of several sizes, series seen again, late windows, several batches merged
together, a restart and a merge cut off part-way."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from aggregator.member_text import number_text
from aggregator.stored_windows import partials_order, size_partials
from aggregator.window_ids import WindowIds
from aggregator.window_partials import ALL_METRICS, partials_schema
from aggregator.window_writer import WindowWriter, stage
from contract import redis_layout as layout
from tests.aggregator.merge_oracle import OracleWriter
from tests.aggregator.merge_oracle import size_partials as oracle_size_partials
from tests.aggregator.streaming_input import database, snapshot

pytestmark = pytest.mark.integration

HOUR = 1_700_002_800_000
METRICS = [m for m in ALL_METRICS if m in layout.METRIC_INDEX]


def subjects(target: str, topics: int) -> list[dict]:
    """Partitions, whole topics, the replication and a consumer group's partitions of `topics` topics."""
    out = [{"kind": "partition", "level": "r", "topic": layout.ALL_TOPICS, "partition": layout.WHOLE_TOPIC,
            "group": ""}]
    for t in range(topics):
        topic = f"east.t{t}"
        out.append({"kind": "partition", "level": "t", "topic": topic, "partition": layout.WHOLE_TOPIC,
                    "group": ""})
        out += [{"kind": "partition", "level": "p", "topic": topic, "partition": p, "group": ""}
                for p in range(3)]
        out.append({"kind": "group", "level": "p", "topic": topic, "partition": 0, "group": "g:1|x"})
    return [{**s, "target": target, "source": "east", "upstream_topic": s["topic"]} for s in out]


def value(rng: np.random.Generator) -> float:
    """Whole numbers mostly (counts, offsets: some past 1e10), fractions and negatives sometimes."""
    kind = rng.integers(0, 6)
    if kind == 0:
        return float(rng.normal(0, 1e3))
    if kind == 1:
        return float(rng.integers(10**9, 10**12))
    return float(rng.integers(-5, 10**6))


def wide_batch(rng: np.random.Generator, target: str, topics: int, first: int, windows: int,
               shuffled: bool = False, late: int | None = None) -> pa.Table:
    """Partials of consecutive 10 s windows from window number `first` (plus one window `late`), each
    subject with a random subset of the metrics and last ts anywhere in its window."""
    rows = []
    numbers = [*range(first, first + windows), *([] if late is None else [late])]
    for subject in subjects(target, topics):
        for number in numbers:
            start = HOUR + number * 10_000
            row = {**subject, "window_start": start, "max_ts": start + 9_999}
            for metric in rng.choice(METRICS, size=int(rng.integers(1, len(METRICS) + 1)), replace=False):
                low, high = sorted((value(rng), value(rng)))
                row |= {f"{metric}__n": float(rng.integers(1, 30)), f"{metric}__sum": value(rng),
                        f"{metric}__min": low, f"{metric}__max": high, f"{metric}__last": value(rng),
                        f"{metric}__last_ts": int(start + rng.integers(0, 10_000))}
            rows.append(row)
    if shuffled:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    return pa.Table.from_pylist(rows, schema=partials_schema())


class Both:
    """The oracle and the merge under test, each on its database, fed the same batches."""

    def __init__(self, redis_url: str) -> None:
        self.target = f"oracle{uuid.uuid4().hex[:8]}"
        self.scope = f"merge_{self.target}"
        self.clients = [database(redis_url, 1), database(redis_url, 2)]
        self.writers: list[WindowWriter] = []
        self.restart()

    def restart(self) -> None:
        """New writers, as in a new process: nothing kept."""
        self.writers = [OracleWriter(self.clients[0], self.scope), WindowWriter(self.clients[1], self.scope)]

    def merge(self, batches: list[tuple[int, pa.Table]]) -> None:
        for client, writer in zip(self.clients, self.writers, strict=True):
            with client.pipeline(transaction=True) as pipe:
                for batch_id, windows in batches:
                    stage(pipe, self.scope, batch_id, windows)
                pipe.execute()
            writer.apply_all(batches, staged=True)

    def contents(self) -> list[dict]:
        return [{**snapshot(c, match=f"*{self.target}*"),
                 "applied": c.get(layout.applied_batch_key(self.scope)),
                 "merging": c.hgetall(layout.merging_batches_key(self.scope))} for c in self.clients]

    def assert_equal(self) -> None:
        oracle, merged = self.contents()
        assert merged.keys() == oracle.keys()
        assert [k for k in oracle if oracle[k] != merged[k]] == []
        assert len(oracle) > 3


def test_the_merge_leaves_redis_as_the_acero_merge_did(redis_url: str):
    rng = np.random.default_rng(18)
    both = Both(redis_url)
    script: list[tuple[int, dict[str, Any]]] = [
        (0, dict(topics=3, first=0, windows=9)),
        (1, dict(topics=3, first=9, windows=3, shuffled=True)),  # rows not in (subject, start) order
        (2, dict(topics=5, first=10, windows=30)),  # new series, windows again, several minutes
        (3, dict(topics=5, first=40, windows=1, late=2)),  # a late window, long out of the kept span
    ]
    for batch_id, shape in script:
        both.merge([(batch_id, wide_batch(rng, both.target, **shape))])
        both.assert_equal()
    # Two batches merged together, one repeating windows of the other.
    both.merge([(4, wide_batch(rng, both.target, 4, 41, 6)), (5, wide_batch(rng, both.target, 4, 45, 400))])
    both.assert_equal()
    both.restart()  # the kept windows read again from Redis
    both.merge([(6, wide_batch(rng, both.target, 5, 440, 8, late=300))])
    both.assert_equal()


def test_a_merge_cut_off_part_way_and_resumed_leaves_redis_as_the_acero_merge_did(
        redis_url: str, monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(7)
    both = Both(redis_url)
    both.merge([(0, wide_batch(rng, both.target, 12, 0, 6))])
    batch = wide_batch(rng, both.target, 12, 5, 6)
    for client, writer in zip(both.clients, both.writers, strict=True):
        with client.pipeline(transaction=True) as pipe:
            stage(pipe, both.scope, 1, batch)
            pipe.execute()
        sent, send = [0], writer.send_part

        def dies_in_the_second_part(pipe, calls, then, sent=sent, send=send):
            sent[0] += 1
            if sent[0] == 2:
                raise ConnectionError("the process died in the merge's second part")
            return send(pipe, calls, then)

        monkeypatch.setattr(writer, "send_part", dies_in_the_second_part)
        with pytest.raises(ConnectionError):
            writer.apply_all([(1, batch)], staged=True)
    both.assert_equal()  # the same parts in Redis
    both.restart()
    for writer in both.writers:
        writer.recover(1)
    both.assert_equal()


def test_partials_merge_per_size_as_arrow_grouped_them():
    rng = np.random.default_rng(3)
    n = 4_000
    starts = HOUR + rng.integers(0, 400, n) * 5_000  # some off the 10 s grid: several partials a window
    finest = pa.table({
        "series": pa.array(rng.integers(0, 20, n)), "metric": pa.array(rng.integers(0, 3, n)),
        "start": pa.array(starts),
        **{c: pa.array([value(rng) for _ in range(n)]) for c in ("n", "sum", "min", "max")},
        # Ties of last ts (broken by the value), NaN and -0.0 among the values.
        "last": pa.array(rng.choice([0.0, -0.0, 1.5, float("nan"), 7.0], n)),
        "last_ts": pa.array(starts + rng.integers(0, 3, n))})
    for window in layout.WINDOWS:
        assert rows(size_partials(finest, window)) == rows(oracle_size_partials(finest, window))


def test_batches_partials_are_put_in_the_coarser_sizes_order_as_a_lexsort_puts_them():
    rng = np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(1, 300))
        start = HOUR + rng.integers(0, 8, n) * 10_000
        # Last ts in its window mostly (the packed sort); anywhere at times (the lexsort it falls back to).
        offset = rng.choice([0, 1, 9_999], n) if trial % 4 else rng.integers(-15_000, 15_000, n)
        table = pa.table({"series": rng.integers(0, 20, n), "metric": rng.integers(0, 4, n), "start": start,
                          "last_ts": start + offset,
                          # Ties of last ts broken by the value: NaN and -0.0 among them.
                          "last": rng.choice([0.0, -0.0, 1.5, float("nan"), 7.0, -3.0], n)})
        keys = WindowIds([table]).series_metrics(0, table)
        expected = np.lexsort((table["last"].to_numpy(), table["last_ts"].to_numpy(), keys))
        assert np.array_equal(partials_order(table), expected)


def rows(table: pa.Table) -> dict[tuple, str]:
    """(series, metric, start) -> the values' repr (NaN equal to NaN, -0.0 not to 0.0)."""
    columns = ("n", "sum", "min", "max", "last", "last_ts")
    return {(r["series"], r["metric"], r["start"]): repr([r[c] for c in columns]) for r in table.to_pylist()}


def test_numbers_are_written_as_arrows_cast_writes_them():
    rng = np.random.default_rng(5)
    values = np.concatenate([
        rng.integers(-10**11, 10**11, 20_000).astype(float), rng.normal(0, 1e9, 5_000),
        np.round(rng.normal(0, 100, 5_000), 2),
        [0.0, -0.0, 1e10, 1e10 - 1, -1e10 + 1, -1e10, 9_999_999_999.5, np.nan, np.inf, -np.inf, 2.0**53,
         1e-7]])
    column = pa.chunked_array([pa.array(values[:100]), pa.array(values[100:])])
    assert number_text(column).to_pylist() == column.cast(pa.string()).to_pylist()
