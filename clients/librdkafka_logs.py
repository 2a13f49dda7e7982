"""librdkafka's own log lines routed into Python logging, one logger per cluster, repeats rate-limited.

Left alone, librdkafka writes to stderr itself and, against an unreachable cluster, repeats
``Connect to ... failed: Connection refused`` for every reconnect of every client: about 80 lines a
second for one driver. Every client built in ``clients.kafka_clients`` passes ``client_log_settings``,
so its lines go to the logger ``librdkafka.<alias>`` (level, format and handlers as the process sets
them), and a line of the same shape as one already shown in the last ``REPEAT_INTERVAL_S`` seconds is
counted instead of written. The next line of that shape after the interval says how many were held
back. The process's own warnings (one per retry of a task) carry the news between those summaries.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

LOGGER_PREFIX: Final = "librdkafka"
REPEAT_INTERVAL_S: Final = 60.0
MAX_SHAPES: Final = 512  # distinct line shapes remembered; the oldest is forgotten first

# Numbers (ports, client instance numbers, "after 0ms", timestamps) vary between repeats of one event.
_NUMBERS = re.compile(r"\d+")


@dataclass
class _Shown:
    at: float
    held_back: int = 0


class RepeatLimiter(logging.Filter):
    """Lets a line through when no line of the same shape (logger, level, text without numbers) was
    shown in the last ``interval_s`` seconds; the others are counted and summarised with the next one."""

    def __init__(self, interval_s: float = REPEAT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, max_shapes: int = MAX_SHAPES) -> None:
        super().__init__()
        self.interval_s, self.clock, self.max_shapes = interval_s, clock, max_shapes
        self._shown: OrderedDict[tuple[str, int, str], _Shown] = OrderedDict()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        shape = (record.name, record.levelno, _NUMBERS.sub("#", text))
        now = self.clock()
        with self._lock:
            shown = self._shown.get(shape)
            if shown is not None and now - shown.at < self.interval_s:
                shown.held_back += 1
                return False
            self._shown[shape] = _Shown(now)
            self._shown.move_to_end(shape)
            while len(self._shown) > self.max_shapes:
                self._shown.popitem(last=False)
        if shown is not None and shown.held_back:
            record.msg, record.args = (f"{text} ({shown.held_back} more like it in the last "
                                       f"{now - shown.at:.0f} s not shown)"), ()
        return True


_LIMITER: Final = RepeatLimiter()


def client_logger(alias: str) -> logging.Logger:
    """The logger of librdkafka's lines about cluster ``alias``, with the shared repeat limiter."""
    logger = logging.getLogger(f"{LOGGER_PREFIX}.{alias}")
    if _LIMITER not in logger.filters:
        logger.addFilter(_LIMITER)
    return logger


def client_log_settings(alias: str) -> dict[str, object]:
    """librdkafka settings that route a client's logs into ``client_logger(alias)``.

    ``log.connection.close`` off: a broker closing an idle connection is routine and would be logged
    by every client once per idle period.
    """
    return {"logger": client_logger(alias), "log.connection.close": False}
