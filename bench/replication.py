"""Replication throughput and latency: our driver vs Apache MirrorMaker 2 vs a bare pipe (the ceiling).

    .venv/bin/python bench/replication.py [--records N] [--latency-seconds S] [--bootstraps east=..,west=..]
    .venv/bin/python bench/replication.py --scale [...]   # 1,000 partitions: bench/replication_scale.py

On local clusters (started here unless --bootstraps names running ones): N records of 100 B and N of
1 KB in two 8-partition topics are copied east -> west by (a) `python -m driver`, (b) MM2 in dedicated
mode (`org.apache.kafka.connect.mirror.MirrorMaker`, tasks.max = 1 like our one worker), (c) a bare
confluent-kafka consume -> produce loop with our producer settings. Throughput counts from the first
record that reaches the target to the last, so JVM and group start-up are left out for both. Then a
steady 20k rec/s (Kafka's ProducerPerformance) gives the end-to-end latency of (a) and (b): arrival
time on the target minus the record's CreateTime, which both replicators preserve.

MM2 runs with the aliases src/dst for the same clusters, so its remote topics and its Connect offsets
never collide with ours. The last line is the figure: `driver_vs_mm2_throughput=… driver_vs_ceiling=…
driver_vs_tuned_pipe=… p99_ms_driver=… p99_ms_mm2=…`. The ceiling is the pipe with librdkafka's
defaults, as the line has always been measured; the tuned pipe also refetches 50 ms (not 1 s) after
its prefetch queue fills, as the driver does, and is the stricter anchor.
"""

from __future__ import annotations

import argparse
import functools
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from clients.kafka_clients import LINGER_MS  # noqa: E402
from driver.send_queue import FETCH_QUEUE_BACKOFF_MS as DRIVER_FETCH_QUEUE_BACKOFF_MS  # noqa: E402
from stack import kafka_cluster, srm_properties  # noqa: E402
from stack.jars import kafka_jars  # noqa: E402
from stack.kafka_cluster import LOG4J2, KafkaClusters  # noqa: E402
from stack.prerequisites import require  # noqa: E402
from stack.processes import ManagedProcess  # noqa: E402

LOG = logging.getLogger("bench.replication")

PARTITIONS = 8
SIZES = {"100b": 100, "1kb": 1024}
LATENCY_RATE = 20_000
DEADLINE_S = 600.0
# The same batch and wait as the driver's consumer loop (driver.replication).
POLL_BATCH, POLL_TIMEOUT_S = 2000, 0.1
PIPE_PRODUCER = {"linger.ms": LINGER_MS, "compression.type": "lz4", "enable.idempotence": True, "acks": "all"}


@dataclass
class Run:
    name: str
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


class Bench:
    def __init__(self, east: str, west: str, records: int, workdir: Path) -> None:
        self.east, self.west, self.records, self.workdir = east, west, records, workdir
        self.east_admin, self.west_admin = AdminClient({"bootstrap.servers": east}), AdminClient(
            {"bootstrap.servers": west})
        self.tag = f"{int(time.time()) % 100000}"
        self.topics = [f"bench{self.tag}-{size}" for size in SIZES]
        self.expected = records * len(self.topics)  # what the source topics hold, once preloaded

    # --- set-up --------------------------------------------------------------------------------

    def preload(self) -> None:
        names = [*self.topics, *(f"lat{self.tag}-{name}" for name in ("driver", "base", "mm2"))]
        futures = self.east_admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names])
        for future in futures.values():
            future.result(60)
        for topic, size in zip(self.topics, SIZES.values(), strict=True):
            began = time.monotonic()
            finish(self.perf_producer(topic, self.records, size, -1), DEADLINE_S, f"preload of {topic}")
            LOG.info("preloaded %d x %d B into %s in %.1f s", self.records, size, topic,
                     time.monotonic() - began)
        # The perf producer may lose a few records: the copies must reach what the topics hold.
        self.expected = sum(self.end_offsets(self.east_admin, t) for t in self.topics)
        if self.expected != self.records * len(self.topics):
            LOG.warning("the source topics hold %d records, not %d", self.expected,
                        self.records * len(self.topics))

    def perf_producer(self, topic: str, count: int, size: int, rate: int,
                      props: list[str] | None = None) -> subprocess.Popen:
        java = require("java")
        return subprocess.Popen(
            [java, "-Xmx256m", f"-Dlog4j2.configurationFile={LOG4J2}", "-cp", f"{kafka_jars()}/*",
             "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(count),
             "--record-size", str(size), "--throughput", str(rate), "--producer-props",
             f"bootstrap.servers={self.east}", *(props or ["linger.ms=5", "batch.size=65536"])],
            stdout=open(self.workdir / f"perf-{topic}.log", "ab"), stderr=subprocess.STDOUT)

    # --- throughput ----------------------------------------------------------------------------

    def end_offsets(self, admin: AdminClient, topic: str) -> int:
        requests = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        return sum(f.result().offset for f in admin.list_offsets(requests, request_timeout=30).values())

    def remote_total(self, prefix: str) -> int:
        """Records in the remote topics (end offsets: no transactions in these runs)."""
        existing = self.west_admin.list_topics(timeout=10).topics
        requests = {TopicPartition(f"{prefix}{t}", p): OffsetSpec.latest()
                    for t in self.topics if f"{prefix}{t}" in existing for p in range(PARTITIONS)}
        if not requests:
            return 0
        futures = self.west_admin.list_offsets(requests, request_timeout=10)
        try:
            return sum(future.result().offset for future in futures.values())
        except KafkaException:  # a topic just created: leaders not elected yet
            return 0

    def time_copy(self, name: str, prefix: str) -> Run:
        expected = self.expected
        deadline = time.monotonic() + DEADLINE_S
        first_at, first_count = None, 0
        while time.monotonic() < deadline:
            count = self.remote_total(prefix)
            now = time.monotonic()
            if first_at is None and count > 0:
                first_at, first_count = now, count
            if count >= expected:
                seconds = now - (first_at or now)
                run = Run(name, expected - first_count, seconds)
                LOG.info("%s copied %d records in %.2f s: %.0f rec/s", name, run.records, seconds, run.rate)
                return run
            time.sleep(0.1)
        raise TimeoutError(f"{name} did not copy {expected} records within {DEADLINE_S:.0f} s")

    def ceiling(self, fetch_queue_backoff_ms: int | None = None) -> Run:
        """A bare consume -> produce loop: the most a single Python process can move. With librdkafka's
        defaults (the line's ceiling since it was first run) its consumer waits 1 s
        (fetch.queue.backoff.ms) whenever its prefetch queue is full, which the driver no longer does;
        `fetch_queue_backoff_ms` gives the pipe the driver's setting, a ceiling the driver cannot beat."""
        name = "pipe" if fetch_queue_backoff_ms is None else f"pipe{fetch_queue_backoff_ms}"
        backoff = {} if fetch_queue_backoff_ms is None else {"fetch.queue.backoff.ms": fetch_queue_backoff_ms}
        consumer = Consumer({"bootstrap.servers": self.east, "group.id": f"bench-{name}-{self.tag}",
                             "enable.auto.commit": False, **backoff})
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                         for t in self.topics for p in range(PARTITIONS)])
        producer = Producer({"bootstrap.servers": self.west, **PIPE_PRODUCER})
        created = self.west_admin.create_topics([NewTopic(f"{name}.{t}", PARTITIONS, 1) for t in self.topics])
        for future in created.values():
            future.result(60)
        producer.list_topics(timeout=10)
        expected, copied, began = self.expected, 0, None
        deadline = time.monotonic() + DEADLINE_S
        while copied < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} copied {copied} of {expected} records in {DEADLINE_S:.0f} s")
            for message in consumer.consume(POLL_BATCH, timeout=POLL_TIMEOUT_S):
                if message.error() is not None:
                    continue
                began = began or time.monotonic()
                while True:
                    try:
                        producer.produce(f"{name}.{message.topic()}", message.value(), message.key(),
                                         cast(int, message.partition()), timestamp=message.timestamp()[1],
                                         headers=message.headers())
                        break
                    except BufferError:
                        producer.poll(0.1)
                copied += 1
            producer.poll(0)
        producer.flush(120)
        consumer.close()
        run = Run(name, copied, time.monotonic() - (began or time.monotonic()))
        LOG.info("%s copied %d records in %.2f s: %.0f rec/s", name, run.records, run.seconds, run.rate)
        return run

    # --- latency -------------------------------------------------------------------------------

    def latency(self, source_topic: str, remote_topic: str, seconds: float) -> list[float]:
        consumer = Consumer({"bootstrap.servers": self.west, "group.id": f"bench-lat-{remote_topic}",
                             "auto.offset.reset": "latest"})
        wait_for_topic(self.west_admin, remote_topic)
        consumer.assign([TopicPartition(remote_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        finish(self.perf_producer(source_topic, 200, 100, -1), 120, "warm-up")  # replication is flowing
        samples: list[float] = []
        stop = threading.Event()
        load = self.perf_producer(source_topic, int(LATENCY_RATE * seconds), 100, LATENCY_RATE)

        def end() -> None:
            try:
                finish(load, seconds + 60, f"latency load into {source_topic}")
            finally:
                time.sleep(3)
                stop.set()

        threading.Thread(target=end, daemon=True).start()
        warm_until = time.time() * 1000 + 2000
        while not stop.is_set():
            # A batch consume returns when the batch is full or at its timeout: at 20k rec/s a 5,000
            # batch waited up to 250 ms and stamped every record with the batch's return. Take what
            # is fetched at once, else wait for the first record only, as the driver's loop does.
            messages = consumer.consume(POLL_BATCH, timeout=0) or consumer.consume(1, timeout=POLL_TIMEOUT_S)
            for message in messages:
                if message.error() is None:
                    ts = message.timestamp()[1]
                    if ts > warm_until:
                        samples.append(time.time() * 1000 - ts)
        consumer.close()
        return samples

    # --- the replicators -----------------------------------------------------------------------

    def start_driver(self, latency_topic: str, checkout: Path | None = None) -> ManagedProcess:
        """This checkout's driver (aliases east, west), or another's (`checkout`, with its own .venv;
        aliases ebase, wbase)."""
        source, target = ("east", "west") if checkout is None else ("ebase", "wbase")
        path = srm_properties.write(self.workdir / f"srm-{source}.properties",
                                    {source: self.east, target: self.west},
                                    [(source, target)], "redis://127.0.0.1:1/0", {
                                        "topics": f"bench{self.tag}-.*|{latency_topic}",
                                        "emit.heartbeats.enabled": "false",
                                        "emit.checkpoints.enabled": "false",
                                        "refresh.topics.interval.seconds": 5, "metrics.period": 5})
        return driver_process("driver" if checkout is None else "base", path, self.workdir, checkout).start()

    def start_mm2(self, latency_topic: str) -> ManagedProcess:
        path = self.workdir / "mm2.properties"
        settings = {
            "clusters": "src, dst", "src.bootstrap.servers": self.east, "dst.bootstrap.servers": self.west,
            "src->dst.enabled": "true", "dst->src.enabled": "false",
            "src->dst.topics": f"bench{self.tag}-.*|{latency_topic}", "tasks.max": "1",
            "emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false",
            "sync.topic.acls.enabled": "false", "refresh.topics.interval.seconds": "5",
            "replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1", "checkpoints.topic.replication.factor": "1",
            "config.storage.replication.factor": "1", "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1"}
        path.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        java = require("java")
        command = [java, "-Xms256m", "-Xmx768m", f"-Dlog4j2.configurationFile={LOG4J2}", "-cp",
                   f"{kafka_jars()}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(path)]
        return ManagedProcess("mm2", command, self.workdir / "mm2.log").start()


def driver_process(name: str, config: Path, workdir: Path, checkout: Path | None = None) -> ManagedProcess:
    """`python -m driver` of this checkout, or of another one (`checkout`, with its own .venv)."""
    if checkout is None:
        return ManagedProcess.python_module(name, "driver", ["--config", str(config)], workdir)
    # -P: the other checkout's packages, not this one's from the working directory
    command = [str(checkout / ".venv/bin/python"), "-P", "-m", "driver", "--config", str(config)]
    return ManagedProcess(name, command, workdir / f"{name}.log", {"PYTHONPATH": str(checkout)})


def finish(process: subprocess.Popen, timeout_s: float, what: str) -> None:
    """Waits for a perf producer; one that hangs is killed and named."""
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        raise TimeoutError(f"the {what} did not end within {timeout_s:.0f} s") from None


def wait_for_topic(admin: AdminClient, topic: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while topic not in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} was not created within {timeout_s:.0f} s")
        time.sleep(0.5)


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(bench: Bench, latency_seconds: float, compare_driver: Path | None = None) -> str:
    pipe, tuned_pipe = bench.ceiling(), bench.ceiling(DRIVER_FETCH_QUEUE_BACKOFF_MS)
    results = {}
    replicators = [("driver", bench.start_driver, "east."), ("mm2", bench.start_mm2, "src.")]
    if compare_driver is not None:
        start_base = functools.partial(bench.start_driver, checkout=compare_driver)
        replicators.insert(1, ("base", start_base, "ebase."))
    for name, start, prefix in replicators:
        lat_topic = f"lat{bench.tag}-{name}"
        process = start(lat_topic)
        try:
            run = bench.time_copy(name, prefix)
            samples = bench.latency(lat_topic, f"{prefix}{lat_topic}", latency_seconds)
        finally:
            process.stop()
        LOG.info("%s latency over %d records: p50 %.1f ms, p99 %.1f ms, mean %.1f ms", name, len(samples),
                 percentile(samples, 0.5), percentile(samples, 0.99), statistics.fmean(samples or [0.0]))
        results[name] = (run, samples)
    (driver_run, driver_lat), (mm2_run, mm2_lat) = results["driver"], results["mm2"]
    print(f"records per system: {driver_run.records}; driver {driver_run.rate:.0f} rec/s, "
          f"mm2 {mm2_run.rate:.0f} rec/s, pipe {pipe.rate:.0f} rec/s; "
          f"p50 ms driver {percentile(driver_lat, 0.5):.1f} mm2 {percentile(mm2_lat, 0.5):.1f}")
    return (f"driver_vs_mm2_throughput={driver_run.rate / mm2_run.rate:.2f} "
            f"driver_vs_ceiling={driver_run.rate / pipe.rate:.2f} "
            f"driver_vs_tuned_pipe={driver_run.rate / tuned_pipe.rate:.2f} "
            f"p99_ms_driver={percentile(driver_lat, 0.99):.1f} p99_ms_mm2={percentile(mm2_lat, 0.99):.1f}"
            + (f" driver_vs_base_throughput={driver_run.rate / results['base'][0].rate:.2f} "
               f"p99_ms_base={percentile(results['base'][1], 0.99):.1f}" if "base" in results else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per value size")
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument("--bootstraps", help="east=host:port,west=host:port of running clusters")
    parser.add_argument("--scale", action="store_true",
                        help="one topic of 1,000 partitions instead (bench/replication_scale.py)")
    parser.add_argument("--tasks-max", default="1,4", help="--scale: tasks.max values, one line each")
    parser.add_argument("--repeat", type=int, default=3, help="--scale: interleaved repetitions")
    parser.add_argument("--compare-driver", type=Path,
                        help="also run the driver of this checkout (with its own .venv), e.g. the code "
                             "before a change")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-replication-"))
    clusters = None
    if args.bootstraps:
        bootstraps = dict(item.split("=", 1) for item in args.bootstraps.split(","))
    else:
        if args.scale:  # thousands of partitions and their copies outgrow the stack's 384 MB broker heap
            kafka_cluster.HEAP_OPTS = [*kafka_cluster.HEAP_OPTS, "-Xmx1g"]
        clusters = KafkaClusters(["east", "west"], workdir / "kafka").start()
        bootstraps = {alias: clusters.bootstrap(alias) for alias in ("east", "west")}
    try:
        if args.scale:
            from bench.replication_scale import ScaleBench, measure_scale
            scale_bench = ScaleBench(bootstraps["east"], bootstraps["west"], args.records, workdir,
                                     args.compare_driver)
            line = measure_scale(scale_bench, args.latency_seconds,
                                 [int(v) for v in args.tasks_max.split(",")], args.repeat)
        else:
            bench = Bench(bootstraps["east"], bootstraps["west"], args.records, workdir)
            bench.preload()
            line = measure(bench, args.latency_seconds, args.compare_driver)
    finally:
        if clusters is not None:
            clusters.cleanup()
    LOG.info("logs in %s", workdir)
    print(line)


if __name__ == "__main__":
    main()
