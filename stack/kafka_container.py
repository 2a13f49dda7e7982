"""A single-node KRaft cluster in the official ``apache/kafka`` image, for tests with a Docker engine.

testcontainers' own KafkaContainer drives Confluent's image (its start script lives in /etc/confluent),
so the official image is configured here the way compose.yaml configures it: one combined broker and
controller, its client port published on a fixed loopback port that the broker also advertises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stack.kafka_cluster import free_port
from stack.kafka_version import kafka_image

CLIENT_PORT = 9092
START_TIMEOUT_S = 120.0
STARTED_LINE = "Kafka Server started"
LOG_TAIL_CHARS = 6000

if TYPE_CHECKING:  # testcontainers is imported when a container starts: a machine without Docker skips it
    from testcontainers.core.container import DockerContainer


def publish_on_loopback(container: DockerContainer, container_port: int, host_port: int) -> None:
    """Publishes `container_port` on 127.0.0.1:`host_port` only (a test service has no authentication):
    docker's (host address, port) form, which testcontainers' with_bind_ports does not take."""
    # testcontainers types its ports dict for its own forms (a port or None); docker's run() takes this one.
    container.ports[str(container_port)] = ("127.0.0.1", host_port)  # type: ignore[assignment]


def broker_environment(advertised_host: str, host_port: int) -> dict[str, str]:
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_LISTENERS": f"PLAINTEXT://:{CLIENT_PORT},CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{advertised_host}:{host_port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        # The cleaner's offset map takes 128 MiB of heap at start by default: in a 256 MiB heap that
        # allocation failed one start in a few (OutOfMemoryError, the broker exits).
        "KAFKA_LOG_CLEANER_DEDUPE_BUFFER_SIZE": "16777216",
        "KAFKA_HEAP_OPTS": "-Xmx256m -Xms128m",
    }


class ApacheKafkaContainer:
    def __init__(self, image: str | None = None, advertised_host: str = "127.0.0.1") -> None:
        self.image = image or kafka_image()
        self.advertised_host = advertised_host
        self.host_port = free_port()
        self._container: DockerContainer | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.advertised_host}:{self.host_port}"

    def start(self) -> ApacheKafkaContainer:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.waiting_utils import wait_for_logs

        container = DockerContainer(self.image)
        publish_on_loopback(container, CLIENT_PORT, self.host_port)
        for name, value in broker_environment(self.advertised_host, self.host_port).items():
            container.with_env(name, value)
        self._container = container.start()
        try:
            wait_for_logs(container, STARTED_LINE, timeout=START_TIMEOUT_S)
        except TimeoutError as exc:
            # testcontainers shows only a few hundred characters: the broker's own error is further up.
            try:
                stdout, stderr = container.get_logs()
                tail = (stdout + stderr).decode(errors="replace")[-LOG_TAIL_CHARS:]
            except Exception as logs_error:  # the container may be gone already
                tail = f"(no log: {logs_error})"
            raise TimeoutError(f"{exc}\nThe broker's log, last {LOG_TAIL_CHARS} characters:\n{tail}") \
                from None
        return self

    def stop(self) -> None:
        if self._container is not None:
            self._container.stop()
            self._container = None
