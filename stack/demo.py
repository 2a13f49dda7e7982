"""`make demo`: three sites and one gateway on this machine, with sample traffic, until Ctrl-C.

Each site (east, west, north) is a Kafka cluster of its own plus the site's driver, aggregator and
service; the replications form a ring (north -> east -> west -> north) over the topic `orders`, which
sample traffic fills on every cluster. Every site's service advertises itself in its cluster's
`heartbeats` topic; the gateway service reads the three `heartbeats` topics, so it finds the sites only
through Kafka, and answers any read endpoint for one site (`?site=west`) or for all (`?site=all`).
One Redis server holds every site's rollups, each site in its own database. Configs, logs and data are
under `.demo/`; Ctrl-C (or SIGTERM) stops every process this started.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from clients.entry_point import CONFIG_ERROR_EXIT, StartupError
from stack import srm_properties
from stack.jars import kafka_jars
from stack.kafka_cluster import KafkaClusters, free_port, wait_for_port
from stack.prerequisites import require
from stack.processes import REPO_ROOT, ManagedProcess
from stack.redis_server import RedisServer

LOG = logging.getLogger("demo")

DEMO_DIR = REPO_ROOT / ".demo"
SITES = ("east", "west", "north")
SAMPLE_TOPIC = "orders"
SAMPLE_RATE_PER_S = 100  # per cluster
GATEWAY_PORT = 6670  # SRM Service's default port: the one URL to remember
SITE_PORTS = {"east": 6671, "west": 6672, "north": 6673}
ADVERTISEMENT_INTERVAL_S = 5
START_TIMEOUT_S = 120


@dataclass(frozen=True)
class Site:
    name: str
    source: str  # the site's driver replicates source -> this site's cluster
    port: int
    config: Path


def preferred_port(port: int) -> int:
    """``port`` when it is free here, else any free one (a second demo, or a real service running)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            return free_port()


def redis_db(url: str, db: int) -> str:
    return f"{url.rsplit('/', 1)[0]}/{db}"


def write_site_configs(bootstraps: dict[str, str], redis_url: str) -> list[Site]:
    sites = []
    for index, name in enumerate(SITES):
        source, port = SITES[index - 1], preferred_port(SITE_PORTS[name])
        config = srm_properties.write(DEMO_DIR / f"{name}.properties", bootstraps, [(source, name)],
                                      redis_db(redis_url, index), {
            # Fast enough to see numbers move within a minute; production defaults are 30 s / 10 min.
            "metrics.period": 5, "refresh.topics.interval.seconds": 5, "topics": SAMPLE_TOPIC,
            "aggregator.trigger.interval.ms": 5000,
            "aggregator.checkpoint.dir": str(DEMO_DIR / name / "checkpoints"),
            "service.site": name, "service.port": port, "service.workers": 1,
            "service.advertisement.interval.seconds": ADVERTISEMENT_INTERVAL_S})
        sites.append(Site(name, source, port, config))
    return sites


def write_gateway_config(bootstraps: dict[str, str], redis_url: str, port: int) -> Path:
    """A service at no site of its own: it reads the three heartbeats topics and calls loopback only."""
    redis_url = redis_db(redis_url, len(SITES))  # its own answers (site=local) are empty
    return srm_properties.write(DEMO_DIR / "gateway.properties", bootstraps, [], redis_url, {
        "service.site": "gateway", "service.port": port, "service.workers": 1,
        "service.remote.clusters": ", ".join(SITES), "service.remote.allowed.hosts": "127.0.0.1",
        "service.remote.timeout.ms": 3000,
        "service.advertisement.interval.seconds": ADVERTISEMENT_INTERVAL_S})


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


def start_processes(sites: list[Site], gateway_config: Path) -> list[ManagedProcess]:
    logs, processes = DEMO_DIR / "logs", []
    for site in sites:
        args = ["--config", str(site.config)]
        for part in ("driver", "aggregator", "service"):
            processes.append(ManagedProcess.python_module(f"{part}-{site.name}", part, args, logs).start())
    processes.append(ManagedProcess.python_module("gateway", "service", ["--config", str(gateway_config)],
                                                  logs).start())
    return processes


def watch(processes: list[ManagedProcess], stopping: threading.Event) -> None:
    while not stopping.wait(2):
        for process in processes:
            if not process.running:
                LOG.error("%s exited; its log:\n%s", process.name, process.log_tail())
                stopping.set()


def resolve_spark_connector() -> None:
    """The aggregators' connector jars, once, before three of them start (the part's own resolver, run
    as the part runs: a process)."""
    done = subprocess.run([sys.executable, "-m", "aggregator.kafka_connector"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise StartupError(done.stderr.strip().removeprefix("aggregator.kafka_connector: "))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        for program in ("java", "redis-server"):  # named before anything starts
            require(program)
        kafka_jars()
        resolve_spark_connector()
    except StartupError as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    run_demo()
    return 0


def run_demo() -> None:
    DEMO_DIR.mkdir(exist_ok=True)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    clusters = KafkaClusters(list(SITES), DEMO_DIR / "kafka")
    redis = RedisServer(DEMO_DIR / "redis")
    processes: list[ManagedProcess] = []
    try:
        clusters.start()
        redis.start()
        bootstraps = {alias: clusters.bootstrap(alias) for alias in SITES}
        sites = write_site_configs(bootstraps, redis.url)
        gateway_port = preferred_port(GATEWAY_PORT)
        processes = start_processes(sites, write_gateway_config(bootstraps, redis.url, gateway_port))
        for alias in SITES:
            threading.Thread(target=produce_samples, args=(bootstraps[alias], stopping), daemon=True).start()
        services = {p.name: p for p in processes}
        for site in sites:
            wait_for_port(site.port, START_TIMEOUT_S, services[f"service-{site.name}"].process)
        wait_for_port(gateway_port, START_TIMEOUT_S, services["gateway"].process)
        announce(gateway_port, sites)
        watch(processes, stopping)
    finally:
        stopping.set()
        with ThreadPoolExecutor(max(1, len(processes))) as pool:  # ten processes: stop them together
            list(pool.map(ManagedProcess.stop, processes))
        redis.cleanup()
        clusters.cleanup()
        LOG.info("demo stopped; logs were in %s", DEMO_DIR / "logs")


def announce(gateway_port: int, sites: list[Site]) -> None:
    gateway = f"http://127.0.0.1:{gateway_port}"
    west = next(site for site in sites if site.name == "west")
    one_site = f"{gateway}/v2/topic-metrics/{west.source}/west/{SAMPLE_TOPIC}/record_count?site=west"
    lines = "\n".join(f"  site {s.name:<6} http://127.0.0.1:{s.port}   ({s.source} -> {s.name}, "
                      f"config {s.config.relative_to(REPO_ROOT)})" for s in sites)
    print(f"""
SRM demo is running: three sites, one gateway (logs in {DEMO_DIR / 'logs'}).
  Gateway:            {gateway}/v2/services
  Cross-site query:   {gateway}/v2/replications?site=all
  One site via it:    {one_site}
  Swagger UI:         {gateway}/swagger-ui
{lines}
Sites appear at the gateway within {ADVERTISEMENT_INTERVAL_S} s of their start, metrics within about a
minute (metrics.period = 5 s). Press Ctrl-C to stop everything.
""", flush=True)


if __name__ == "__main__":
    sys.exit(main())
