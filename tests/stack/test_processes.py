"""ManagedProcess stops the whole process group it started, children that outlive the leader too."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from stack.processes import ManagedProcess

# The leader starts a child that ignores SIGTERM (as a Python driver hung in its own shutdown under
# spark-submit did) and exits on SIGTERM itself.
CHILD = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)")
LEADER = ("import subprocess, sys, time; "
          "subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]]); time.sleep(600)")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.usefixtures("external_processes")
def test_stop_ends_a_child_that_outlives_the_leader(tmp_path: Path):
    pid_file = tmp_path / "child.pid"
    process = ManagedProcess("leader", [sys.executable, "-c", LEADER, CHILD, str(pid_file)],
                             tmp_path / "leader.log").start()
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    process.stop(timeout_s=1.0)
    assert not process.running
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)
