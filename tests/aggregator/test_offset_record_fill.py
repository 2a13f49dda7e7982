"""A task's offset record filled into its ring (offset_records.TaskHistory) reads back as the same windows
merged one at a time (offset_history.OffsetHistory.merge): rows of one newest window copied as slices, rows
whose windows wrap round the ring, windows not held and rows holding nothing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from aggregator.offset_history import METRICS, NO_DELTA, WINDOW_MS, OffsetHistory
from aggregator.offset_records import HOT_WINDOWS, TASK_SLOTS, OffsetRecord, TaskHistory

BASE = 170_000_000 // TASK_SLOTS * TASK_SLOTS  # a window number (10 s since the epoch) in slot 0


def record(rows: int, windows: int, seed: int) -> OffsetRecord:
    rng = np.random.default_rng(seed)
    newest = rng.choice([BASE + 40, BASE + 40, BASE + 40, BASE + 61, BASE + 60, BASE + 3, -1], rows)
    delta = rng.integers(-1000, 1000, (rows, windows, 3)).astype(np.int32)
    delta[rng.random((rows, windows, 3)) < 0.2] = NO_DELTA
    delta[rng.random((rows, windows)) < 0.2] = NO_DELTA  # windows not held
    delta[newest < 0] = NO_DELTA
    at = rng.integers(0, WINDOW_MS, (rows, windows, 3)).astype(np.int16)
    at[delta == NO_DELTA] = 0
    topics = [f"x{seed}.{r}" for r in range(rows)]
    keys = pa.table({"target": ["t"] * rows, "source": ["s"] * rows, "topic": topics,
                     "partition": pa.array(range(rows), pa.int64())})
    newest = newest.astype(np.int64)
    return OffsetRecord(keys, newest, newest - windows + 1, np.full(rows, -np.inf), np.zeros(rows),
                        rng.integers(0, 10**9, (rows, 3)), np.ones((rows, 3), bool), delta, at)


def merged_one_at_a_time(records: list[OffsetRecord]) -> OffsetHistory:
    history = OffsetHistory(TASK_SLOTS)
    for rec in records:
        keys = list(zip(*(rec.keys[k].to_pylist() for k in ("target", "source", "topic", "partition")),
                        strict=True))
        rows = history.row_of(keys)
        for k, metric in enumerate(METRICS):
            number = rec.newest[:, None] - np.arange(rec.windows)[None, :]
            held = rec.delta[:, :, k] != NO_DELTA
            last = (rec.base[:, k][:, None] + rec.delta[:, :, k].astype(np.int64)).astype(np.float64)
            start = number * WINDOW_MS
            history.merge(metric, np.broadcast_to(rows[:, None], held.shape)[held], start[held], last[held],
                          start[held] + rec.at[:, :, k][held])
    return history


def test_a_filled_record_reads_back_as_its_windows_merged():
    records = [record(5000, HOT_WINDOWS, 1), record(300, TASK_SLOTS - 2, 2)]
    filled, merged = TaskHistory(records, TASK_SLOTS), merged_one_at_a_time(records)
    rows = np.arange(len(filled.keys))
    for metric in METRICS:
        for high in (BASE + 3, BASE + 40, BASE + 60, BASE + 61, BASE + 100):
            a = filled.gather(metric, rows, np.full(len(rows), high), TASK_SLOTS)
            b = merged.gather(metric, rows, np.full(len(rows), high), TASK_SLOTS)
            assert np.array_equal(a[2], b[2])
            assert np.array_equal(np.where(a[2], a[1], 0), np.where(b[2], b[1], 0))
