"""The sink's child process (merge_child's window writer): how it starts, and ends.

Started by spawn (the parent holds a JVM gateway and threads, which a forked child must not inherit) with
a pipe to their owner. A child ignores stop signals: one sent to the whole process group (systemd's
default, a Ctrl-C, `kill -- -pgid`) must not end it under a batch its owner still finishes; its owner
closing the pipe ends it. At interpreter exit (multiprocessing joins its children then) every owner still
open is closed first, or a sink nobody closed would keep the process from ending.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util  # its exit handler, registered on import, must come before ours
import signal
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Protocol


class Owner(Protocol):
    def close(self) -> None: ...


def spawn(owner: Owner, target: Callable[..., None], args: tuple[Any, ...],
          name: str) -> tuple[Connection, BaseProcess]:
    """Starts `target(*args, conn, level)` in a child named `name`, `conn` its end of the pipe and `level`
    the effective level of the target's module logger; returns the owner's end and the process. The owner
    is closed at interpreter exit if it still runs."""
    _OPEN.add(owner)
    context = multiprocessing.get_context("spawn")
    conn, child = context.Pipe()
    level = logging.getLogger(target.__module__).getEffectiveLevel()
    process = context.Process(target=target, args=(*args, child, level), name=name, daemon=True)
    process.start()
    child.close()
    return conn, process


def in_child(level: int) -> None:
    """A child's first step: stop signals ignored, logging at its owner's level."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


_OPEN: weakref.WeakSet[Owner] = weakref.WeakSet()


@atexit.register  # registered after multiprocessing's own exit handler, so it runs before it
def _close_open_owners() -> None:
    for owner in list(_OPEN):
        owner.close()
