"""`make demo`: the whole pipeline on this machine, with sample traffic, until Ctrl-C.

Starts two Kafka clusters (east, west) and Redis, writes `.demo/srm.properties`, runs the driver,
the aggregator and the service as child processes, produces sample records to `orders` on east, and
prints the URLs to try. Ctrl-C (or SIGTERM) stops every process it started.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from stack import srm_properties
from stack.kafka_cluster import KafkaClusters, free_port, wait_for_port
from stack.processes import REPO_ROOT, ManagedProcess
from stack.redis_server import RedisServer

LOG = logging.getLogger("demo")

DEMO_DIR = REPO_ROOT / ".demo"
SAMPLE_TOPIC = "orders"
SAMPLE_RATE_PER_S = 200
PREFERRED_PORT = 6670


def service_port() -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", PREFERRED_PORT))
            return PREFERRED_PORT
        except OSError:
            return free_port()


def produce_samples(bootstrap: str, stopping: threading.Event) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    topic = NewTopic(SAMPLE_TOPIC, num_partitions=3, replication_factor=1)
    admin.create_topics([topic])[SAMPLE_TOPIC].result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    sequence = 0
    while not stopping.is_set():
        for _ in range(SAMPLE_RATE_PER_S // 10):
            producer.produce(SAMPLE_TOPIC, key=f"customer-{sequence % 50}".encode(),
                             value=f'{{"order": {sequence}, "amount": {sequence % 97}}}'.encode())
            sequence += 1
        producer.poll(0)
        stopping.wait(0.1)
    producer.flush(10)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    DEMO_DIR.mkdir(exist_ok=True)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    clusters = KafkaClusters(["east", "west"], DEMO_DIR / "kafka")
    redis = RedisServer(DEMO_DIR / "redis")
    processes: list[ManagedProcess] = []
    try:
        clusters.start()
        redis.start()
        port = service_port()
        bootstraps = {alias: clusters.bootstrap(alias) for alias in ("east", "west")}
        config = srm_properties.write(DEMO_DIR / "srm.properties", bootstraps, [("east", "west")],
                                      redis.url, {
            # Fast enough to see numbers move within a minute; production defaults are 30 s / 10 min.
            "metrics.period": 5, "refresh.topics.interval.seconds": 5, "service.port": port,
            "aggregator.checkpoint.dir": str(DEMO_DIR / "checkpoints")})
        args = ["--config", str(config)]
        for name in ("driver", "aggregator", "service"):
            processes.append(ManagedProcess.python_module(name, name, args, DEMO_DIR / "logs").start())
        traffic = threading.Thread(target=produce_samples, args=(bootstraps["east"], stopping), daemon=True)
        traffic.start()
        wait_for_port(port, 60, processes[-1].process)
        announce(port, config)
        while not stopping.wait(2):
            for process in processes:
                if not process.running:
                    LOG.error("%s exited; its log:\n%s", process.name, process.log_tail())
                    stopping.set()
    finally:
        stopping.set()
        for process in reversed(processes):
            process.stop()
        redis.cleanup()
        clusters.cleanup()
        LOG.info("demo stopped; logs were in %s", DEMO_DIR / "logs")


def announce(port: int, config: Path) -> None:
    base = f"http://127.0.0.1:{port}"
    print(f"""
SRM demo is running (config {config}, logs in {DEMO_DIR / 'logs'}).
  API:            {base}/v2/topic-metrics/east/west/{SAMPLE_TOPIC}/record_count?granularity=10s
  OpenAPI:        {base}/openapi.json
Metrics appear within about a minute (metrics.period = 5 s). Press Ctrl-C to stop everything.
""", flush=True)


if __name__ == "__main__":
    main()
