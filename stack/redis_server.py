"""A real `redis-server` on a free loopback port for the demo, tests and benches, durable as deployed.

Persistence is the append-only file, fsynced every second (`appendfsync everysec`): a restart or a crash
of Redis loses at most the last second of writes, and the sink's MULTI per batch is replayed whole or
not at all, so the exactly-once state (batch ids, applied ids) stays consistent with the windows. No RDB
snapshots: they would fork a copy of the whole data set every few minutes for nothing the AOF lacks.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from stack.kafka_cluster import free_port, wait_for_port
from stack.prerequisites import require

LOG = logging.getLogger(__name__)

DURABILITY = ("--appendonly", "yes", "--appendfsync", "everysec", "--save", "")


class RedisServer:
    def __init__(self, workdir: Path | None = None) -> None:
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="srm-redis-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Starts the server; after a stop, the same port and data directory (its AOF is loaded)."""
        server = require("redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [server, "--port", str(self.port), "--bind", "127.0.0.1", *DURABILITY,
                   "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log")]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        wait_for_port(self.port, 15.0, self.process)
        LOG.info("redis-server up on %s (AOF in %s)", self.url, self.workdir)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()  # a paused server cannot act on SIGTERM
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """kill -9: a crash, for durability tests (the AOF keeps what was fsynced)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: a hung Redis that keeps its connections open (tests of client timeouts)."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
