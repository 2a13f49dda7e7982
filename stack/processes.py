"""Child processes of the local stack (driver, aggregator, service) with logs in files.

Each runs in its own session so a stop reaches its children too, and is never left behind: stop()
sends SIGTERM to the session's group, then SIGKILL to what is left of it when it does not exit in time.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LOG = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parent.parent


class ManagedProcess:
    def __init__(self, name: str, args: list[str], log_file: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.args, self.log_file = name, args, log_file
        self.env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
        self.process: subprocess.Popen | None = None

    @classmethod
    def python_module(cls, name: str, module: str, args: list[str], log_dir: Path,
                      env: dict[str, str] | None = None) -> ManagedProcess:
        return cls(name, [sys.executable, "-m", module, *args], log_dir / f"{name}.log", env)

    def start(self) -> ManagedProcess:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                            cwd=REPO_ROOT, start_new_session=True)
        LOG.info("started %s (pid %d), log %s", self.name, self.process.pid, self.log_file)
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """kill -9 of the whole process group: a crash, for recovery tests."""
        if self.process is None:
            return
        self._signal_group(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the whole group; SIGKILL to what is left of it after `timeout_s`. The group, not
        only the leader: spark-submit's JVM exits at once, and its Python driver (a child) once hung in
        its own shutdown and outlived every test."""
        if self.process is None or not self._group_alive():
            return
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self._group_alive():
            LOG.warning("%s did not stop in %.0f s; killing it", self.name, timeout_s)
            self.kill()

    def _group_alive(self) -> bool:
        if self.process is None:  # never started: no group
            return False
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
