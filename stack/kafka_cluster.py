"""Single-node Apache Kafka KRaft clusters run from the Maven Central jars, one per cluster alias.

Each node is `kafka.Kafka` (broker + controller) on free loopback ports, with a small heap, its log in
a file and its data in a temporary folder. Several clusters start in parallel because JVM start-up,
not CPU, dominates; they are stopped with SIGTERM (clean shutdown) and killed if that hangs.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from stack.jars import kafka_jars
from stack.prerequisites import require
from stack.secured_listeners import LISTENERS, BrokerSecurity

LOG = logging.getLogger(__name__)

HEAP_OPTS = ["-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
START_TIMEOUT_S = 90.0
LOG4J2 = Path(__file__).parent / "log4j2.properties"
# ACLs enforced. The controller, the broker's own traffic and every PLAINTEXT client authenticate as
# User:ANONYMOUS, which is therefore the super user; any other principal (a SASL or TLS listener's)
# needs ACLs, and gets none by default.
STANDARD_AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
}


_HANDED_OUT: set[int] = set()
_HANDING_OUT = threading.Lock()
# "i/n": this process hands out only ports p with (p // 2) % n == i, so that n processes picking ports
# side by side (the test suite's pytest-xdist workers set it) never hand out the same one. Halved first
# because Linux gives bind(0) even ports while it has any.
PORT_SLICE_ENV = "SRM_PORT_SLICE"


def port_slice() -> tuple[int, int]:
    """(i, n) from $SRM_PORT_SLICE, (0, 1) when it is unset."""
    value = os.environ.get(PORT_SLICE_ENV, "")
    if not value:
        return 0, 1
    index, _, count = value.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise ValueError(f"{PORT_SLICE_ENV} must be 'i/n' with 0 <= i < n, not {value!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"{PORT_SLICE_ENV} must be 'i/n' with 0 <= i < n, not {value!r}")
    return i, n


def free_port() -> int:
    """A loopback port free now and not handed out before by this process (nor, with $SRM_PORT_SLICE,
    by the processes picking ports beside it): the kernel may give the same ephemeral port to two binds
    in a row once the first socket closed (seen in CI: a broker's PLAINTEXT and CONTROLLER listeners got
    one port and the broker refused to format its storage)."""
    index, count = port_slice()
    # Held open while looking, so that the kernel offers other ports; all closed before returning.
    refused: list[socket.socket] = []
    try:
        with _HANDING_OUT:
            while True:
                s = socket.socket()
                refused.append(s)
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
                if port not in _HANDED_OUT and (port // 2) % count == index:
                    _HANDED_OUT.add(port)
                    return port  # its socket closes with the refused ones
    finally:
        for s in refused:
            s.close()


def wait_for_port(port: int, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with code {process.returncode} before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"port {port} did not open within {timeout_s:.0f} s")


@dataclass
class KafkaCluster:
    """One KRaft node acting as a whole cluster named `alias`; with ``security``, it also opens the
    secured listeners of ``stack.secured_listeners`` (PLAINTEXT stays, for set-up and the broker)."""

    alias: str
    workdir: Path
    authorizer: bool = False  # KRaft's StandardAuthorizer; PLAINTEXT clients (User:ANONYMOUS) are super users
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    started_in_s: float = 0.0
    security: BrokerSecurity | None = None
    secured_ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.security is not None and not self.secured_ports:
            self.secured_ports = {name: free_port() for name in LISTENERS.values()}

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def secured_bootstrap(self, mode: str) -> str:
        """bootstrap.servers of the listener of a security mode (``sasl_plaintext``, ``ssl``, …)."""
        if self.security is None:
            raise ValueError(f"Kafka cluster {self.alias} was started without secured listeners")
        return f"127.0.0.1:{self.secured_ports[LISTENERS[mode]]}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    def start(self) -> KafkaCluster:
        began = time.monotonic()
        java = require("java")
        classpath = f"{kafka_jars()}/*"
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self._write_server_properties()
        if not (self.workdir / "data" / "meta.properties").exists():  # a restart keeps its data
            self._format_storage(java, classpath, props)
        command = [java, *HEAP_OPTS, f"-Dlog4j2.configurationFile={LOG4J2}",
                   f"-Dkafka.logs.dir={self.workdir}", "-cp", classpath, "kafka.Kafka", str(props)]
        LOG.info("starting Apache Kafka broker %s on %s (jars %s)", self.alias, self.bootstrap_servers,
                 kafka_jars())
        log_start = self.log_file.stat().st_size if self.log_file.exists() else 0  # a restart appends
        with open(self.log_file, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        try:
            wait_for_port(self.port, START_TIMEOUT_S, self.process)
            self._wait_until_serving(began + START_TIMEOUT_S, log_start)
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"Kafka cluster {self.alias} failed to start: {exc}; "
                               f"last log lines:\n{self._log_tail()}") from exc
        self.started_in_s = time.monotonic() - began
        LOG.info("Apache Kafka broker %s up in %.1f s", self.alias, self.started_in_s)
        return self

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def _write_server_properties(self) -> Path:
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        settings = {
            "process.roles": "broker,controller",
            **(STANDARD_AUTHORIZER if self.authorizer else {}),
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # Fewer threads: several brokers share two cores with Spark and the test process.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "log.cleaner.threads": "1",
            # 16 MiB, not 128, of each broker's heap for the cleaner's offset map, as the containers do.
            "log.cleaner.dedupe.buffer.size": "16777216",
        }
        if self.security is not None:
            ports = {"PLAINTEXT": self.port, "CONTROLLER": self.controller_port, **self.secured_ports}
            settings.update(self.security.server_settings(ports))
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def _format_storage(self, java: str, classpath: str, props: Path) -> None:
        cluster_id = subprocess.run([java, "-cp", classpath, "kafka.tools.StorageTool", "random-uuid"],
                                    capture_output=True, text=True, check=True).stdout.strip()
        done = subprocess.run([java, *HEAP_OPTS, "-cp", classpath, "kafka.tools.StorageTool", "format",
                               "--standalone", "-t", cluster_id, "-c", str(props),
                               *(self.security.format_arguments() if self.security else [])],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"formatting storage of {self.alias} failed: {done.stdout}{done.stderr}")

    def _wait_until_serving(self, deadline: float, log_start: int = 0) -> None:
        # The port opens before the broker has registered with its controller; clients connecting in
        # between get "no brokers" metadata, so wait for the broker's own "started" line.
        while time.monotonic() < deadline:
            if b"Kafka Server started" in self.log_file.read_bytes()[log_start:]:
                return
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"broker exited with code {self.process.returncode}")
            time.sleep(0.1)
        raise TimeoutError("broker did not report 'Kafka Server started' in time")

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class KafkaClusters:
    """Independent clusters keyed by alias, started in parallel and stopped together."""

    def __init__(self, aliases: list[str], root: Path | None = None,
                 security: BrokerSecurity | None = None) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="srm-kafka-"))
        self.clusters = {alias: KafkaCluster(alias, self.root / alias, security=security)
                         for alias in aliases}

    def start(self) -> KafkaClusters:
        kafka_jars()  # resolve once before the parallel starts race for it
        with ThreadPoolExecutor(max_workers=len(self.clusters)) as pool:
            futures = [pool.submit(c.start) for c in self.clusters.values()]
            errors = [error for f in futures if (error := f.exception()) is not None]
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        with ThreadPoolExecutor(max_workers=max(1, len(self.clusters))) as pool:
            list(pool.map(lambda c: c.stop(), self.clusters.values()))

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def bootstrap(self, alias: str) -> str:
        return self.clusters[alias].bootstrap_servers

    def __getitem__(self, alias: str) -> KafkaCluster:
        return self.clusters[alias]
