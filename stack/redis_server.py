"""A real `redis-server` on a free loopback port, persistence off, for the demo, tests and benches."""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from stack.kafka_cluster import free_port, wait_for_port
from stack.prerequisites import require

LOG = logging.getLogger(__name__)


class RedisServer:
    def __init__(self, workdir: Path | None = None) -> None:
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="srm-redis-"))
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        server = require("redis-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(self.workdir),
                   "--logfile", str(self.workdir / "redis.log")]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        wait_for_port(self.port, 15.0, self.process)
        LOG.info("redis-server up on %s", self.url)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
