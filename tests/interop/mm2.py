"""Apache MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`), from the jars
bench/replication.py runs, with settings for single-broker test clusters."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from stack.jars import kafka_jars
from stack.kafka_cluster import LOG4J2
from stack.prerequisites import require
from stack.processes import ManagedProcess

SINGLE_BROKER = {
    "replication.factor": 1, "offset-syncs.topic.replication.factor": 1,
    "heartbeats.topic.replication.factor": 1, "checkpoints.topic.replication.factor": 1,
    "config.storage.replication.factor": 1, "offset.storage.replication.factor": 1,
    "status.storage.replication.factor": 1, "tasks.max": 1,
}
STOP_TIMEOUT_S = 60.0


class MirrorMaker:
    """One MM2 process replicating `source -> target` (the reverse flow disabled)."""

    def __init__(self, workdir: Path, bootstraps: Mapping[str, str], source: str, target: str,
                 settings: Mapping[str, object]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        lines = {"clusters": ", ".join(bootstraps),
                 **{f"{alias}.bootstrap.servers": servers for alias, servers in bootstraps.items()},
                 f"{source}->{target}.enabled": "true", f"{target}->{source}.enabled": "false",
                 f"{target}->{source}.emit.heartbeats.enabled": "false",
                 **SINGLE_BROKER, **settings}
        self.config = workdir / "mm2.properties"
        self.config.write_text("".join(f"{key} = {value}\n" for key, value in lines.items()))
        command = [require("java"), "-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                   f"-Dlog4j2.configurationFile={LOG4J2}", "-cp", f"{kafka_jars()}/*",
                   "org.apache.kafka.connect.mirror.MirrorMaker", str(self.config)]
        self.process = ManagedProcess("mm2", command, workdir / "mm2.log")

    def start(self) -> MirrorMaker:
        self.process.start()
        return self

    def stop(self) -> int | None:
        """SIGTERM, a clean stop: Connect commits the source offsets of what the target acknowledged.
        Returns the exit code (None if it had to be killed)."""
        began = time.monotonic()
        self.process.stop(STOP_TIMEOUT_S)
        popen = self.process.process
        if popen is None or time.monotonic() - began >= STOP_TIMEOUT_S:
            return None
        return popen.returncode

    def log(self) -> str:
        return self.process.log_file.read_text(errors="replace")

    def assert_running(self) -> None:
        assert self.process.running, f"MM2 exited:\n{self.process.log_tail(60)}"
