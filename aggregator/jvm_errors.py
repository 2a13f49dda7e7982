"""What the foreachBatch sink raises when a call into Spark's JVM fails: a short text, not a Java trace.

A call from the sink into the JVM (the batch's `toArrow` above all) fails with a Py4JJavaError when the
query is stopped mid-batch (Spark cancels the batch's job) or when the job fails. Py4J hands the JVM the
sink's Python traceback as text, and that text then held the whole Java trace: a few hundred frames.
When the query is stopping, Spark decides whether the batch failed because of the stop by matching that
text against a pattern that recurses once a character after a Py4JJavaError's name
(`StreamExecution.PROXY_ERROR` in Spark 4.2): over a text of ~15 kB the stream execution thread's stack
overflowed, and a StackOverflowError ended the thread instead of the stop.

So the sink raises `JvmCallFailed` instead, from None (no chained trace): the Java exception and each of
its causes on a line of their own, without their stack frames. It keeps what readers of the query's
error use: the Kafka client's exception names and messages (clients.client_faults.classify_java), a
Python worker's traceback, and what Spark reads to tell a stop (a SparkException saying the job was
cancelled, and the query run's job group). The full Java trace goes to this module's log at DEBUG.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JJavaError

LOG = logging.getLogger(__name__)

MAX_LINES = 24  # an exception and its causes, with a Python worker's traceback among them
MAX_LINE_CHARS = 500
_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")


class JvmCallFailed(RuntimeError):
    """A call into Spark's JVM failed in a batch; the message is the Java exception and its causes."""


@contextmanager
def short_jvm_errors(where: str) -> Iterator[None]:
    """Turns a Py4JJavaError raised in the block, or chained to what it raised, into `JvmCallFailed`
    (`where` begins its message); other exceptions pass as they are."""
    try:
        yield
    except Exception as exc:
        java = _java_error_in(exc)
        if java is None:
            raise
        text = _java_text(java)
        LOG.debug("%s: %s", where, text)
        raise JvmCallFailed(f"{where}: {summary(text)}") from None


def summary(java_text: str) -> str:
    """A Java exception's text as Py4J gives it, without stack frames: its lines and its causes'."""
    lines = [line.rstrip()[:MAX_LINE_CHARS] for line in java_text.splitlines()
             if line.strip() and not _FRAME.match(line)]
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES - 1] + [f"... {len(lines) - MAX_LINES + 1} more lines"]
    # Nothing in it may start Spark's recursive match again (a Python trace quoted in a Java message).
    return "\n".join(lines).replace("Py4JJavaError:", "Py4JJavaError -")


def _java_error_in(exc: BaseException) -> Py4JJavaError | None:
    seen: BaseException | None = exc
    for _ in range(16):  # a chain is short; this bounds a cycle
        if seen is None or isinstance(seen, Py4JJavaError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _java_text(error: Py4JJavaError) -> str:
    try:
        return str(error)  # asks the JVM for the trace
    except Exception:  # the JVM is gone or its gateway closed: what py4j kept
        return error.errmsg
