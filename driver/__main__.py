"""`srm-driver --config srm.properties`: runs every replication whose target this driver serves.

Per replication (SRM convention, ``SrmConfig.replications()``): enabled -> data, checkpoints and
heartbeats; disabled -> heartbeats only; disabled with ``emit.heartbeats.enabled = false`` -> nothing.
Every target cluster with an enabled replication gets one ``ControlLists`` reader, shared by the
replications into it, so srm-control edits apply without a restart.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from clients.entry_point import parse_and_start
from clients.reachability import warn_unreachable_clusters
from contract.config import SrmConfig
from driver.checkpoint_worker import CheckpointWorker
from driver.control_lists import ControlLists
from driver.heartbeat_task import HeartbeatTask
from driver.reader_health import ReplicationReaders
from driver.replication import ReplicationWorker

LOG = logging.getLogger("driver")

# SIGTERM to exit: every task gets this long to flush, commit or abort and close its clients (their own
# shutdown waits are bounded by SHUTDOWN_FLUSH_S). A task still busy then (a call into a cluster that
# went silent) is left behind and the process exits: what it had not recorded as progress is replayed
# by the next owner, and an open transaction is aborted when that owner fences it.
STOP_DEADLINE_S = 8.0


@dataclass
class DriverTasks:
    """Everything one driver process runs, in start order (stopped in the reverse order)."""

    control_load_timeout_s: float  # control.lists.load.timeout.seconds
    control: dict[str, ControlLists] = field(default_factory=dict)
    heartbeats: list[HeartbeatTask] = field(default_factory=list)
    workers: list[threading.Thread] = field(default_factory=list)

    def start(self, stopping: threading.Event) -> None:
        for lists in self.control.values():
            lists.start()
        for task in self.heartbeats:
            task.start()
        # Replicating before the lists are read could copy a topic an operator has denied.
        deadline = time.monotonic() + self.control_load_timeout_s
        for alias, lists in self.control.items():
            while not lists.wait_until_loaded(0.5) and not stopping.is_set():
                if time.monotonic() > deadline:
                    LOG.warning("srm-control lists of %s not read within %.0f s; starting without them, "
                                "they apply once read", alias, self.control_load_timeout_s)
                    break
        if stopping.is_set():
            return
        for worker in self.workers:
            worker.start()

    def stop(self, deadline_s: float = STOP_DEADLINE_S) -> list[str]:
        """Joins the threads (``stopping`` is already set) until the deadline; workers first, they read
        the lists. Returns the names of the threads still running then."""
        deadline = time.monotonic() + deadline_s
        threads = [*reversed(self.workers), *reversed(self.heartbeats)]
        for thread in threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        for lists in reversed(self.control.values()):
            lists.stop(max(0.1, deadline - time.monotonic()))
        hung = [t.name for t in threads if t.is_alive()]
        hung += [f"control lists of {alias}" for alias, lists in self.control.items() if lists.running]
        return hung


def build_tasks(config: SrmConfig, stopping: threading.Event) -> DriverTasks:
    """The tasks of every replication into this driver's targets; ConfigError for bad settings."""
    wait_s = config.setting("control.lists.load.timeout.seconds")
    if wait_s is None or wait_s < 0:
        raise config.config_error("control.lists.load.timeout.seconds", f"must be 0 or more, got {wait_s}")
    tasks = DriverTasks(wait_s)
    replications = config.replications()
    for target in dict.fromkeys(r.target for r in replications if r.enabled):
        tasks.control[target] = ControlLists(config, target)
    for replication in replications:
        if replication.emit_heartbeats:
            tasks.heartbeats.append(HeartbeatTask(config, replication, stopping))
        if replication.enabled:
            # One report per replication carries the health of every reader it depends on.
            control, readers = tasks.control[replication.target], ReplicationReaders(replication.name)
            readers.adopt_control(control)
            tasks.workers.append(ReplicationWorker(config, replication, stopping, control, readers))
            tasks.workers.append(CheckpointWorker(config, replication, stopping, control, readers))
    LOG.info("driver for %s: %d replication(s) enabled, %d emitting heartbeats only",
             ", ".join(config.driver_target_clusters) or "no target",
             sum(1 for r in replications if r.enabled),
             sum(1 for r in replications if r.emit_heartbeats and not r.enabled))
    return tasks


def main(argv: list[str] | None = None) -> int:
    stopping = threading.Event()

    def prepare(config: SrmConfig) -> tuple[SrmConfig, DriverTasks]:
        tasks = build_tasks(config, stopping)
        involved = [alias for r in config.replications() if r.enabled or r.emit_heartbeats
                    for alias in (r.source, r.target)]
        warn_unreachable_clusters(config, involved, "its tasks retry with backoff until it answers")
        return config, tasks

    started = parse_and_start("srm-driver", __doc__.splitlines()[0], argv, prepare)
    if isinstance(started, int):
        return started
    config, tasks = started
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    if not tasks.heartbeats and not tasks.workers:
        LOG.warning("nothing to run: no replication into %s is enabled or emits heartbeats",
                    ", ".join(config.driver_target_clusters))
    tasks.start(stopping)
    while not stopping.wait(1.0):
        pass
    LOG.info("stopping")
    hung = tasks.stop()
    if hung:
        LOG.warning("%s did not stop within %.0f s; exiting without them", ", ".join(hung), STOP_DEADLINE_S)
        logging.shutdown()
        os._exit(1)  # their threads sit in librdkafka calls that an interpreter exit would wait for
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
