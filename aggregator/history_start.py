"""Where a rebuilt query's history starts: the earliest window of its first batch (aggregator.rebuild).

A rebuild records when it found the state gone (redis_layout.rebuild_key); the rebuilt query reads from
the earliest offsets Kafka retains, so the earliest window of the first batch it writes is where its
history starts. The sink adds it to the record in that batch's MULTI (HSETNX: set once per rebuild).
"""

from __future__ import annotations

from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import redis

from contract import redis_layout as layout


class HistoryStart:
    """One per sink: asks Redis until it has written the start (or there is no rebuild waiting for it)."""

    def __init__(self, target: str | None) -> None:
        self.target = target
        self._waiting: bool | None = None  # None: not asked yet

    def pending(self, client: redis.Redis, windows: pa.Table) -> int | None:
        """The start to write with this batch, if a rebuild record waits for one."""
        if self.target is None or self._waiting is False or not windows.num_rows:
            return None
        record = cast(dict[bytes, bytes], client.hgetall(layout.rebuild_key(self.target)))
        self._waiting = False  # written by this batch's MULTI, or nothing waits for it
        if b"detected_ts" not in record or b"history_from_ts" in record:
            return None
        return int(pc.min(windows["window_start"]).as_py())

    def queue(self, pipe: redis.client.Pipeline, start_ms: int | None) -> None:
        if start_ms is not None and self.target is not None:
            pipe.hsetnx(layout.rebuild_key(self.target), "history_from_ts", str(start_ms))
