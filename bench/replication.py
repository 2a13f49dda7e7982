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
never collide with ours. Every system runs once in each of `--repeat` repetitions, the order rotating,
each repetition with aliases (remote topics) and a latency topic of its own; each copy also reads its
copier's CPU from the first copied record to the last (CPU microseconds a record: steady where rates
swing with the host's load). The last line is the figure, medians of the per-repetition ratios:
`driver_vs_mm2_throughput=… driver_vs_ceiling=… driver_vs_tuned_pipe=… p99_ms_driver=… p99_ms_mm2=…
cpu_us_driver=… cpu_us_tuned_pipe=… driver_vs_tuned_pipe_cpu=…`. The ceiling is the pipe with librdkafka's
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # noqa: E402

from bench.process_cpu import CLOCK_TICKS, stat_ticks  # noqa: E402
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
    cpu_s: float = float("nan")  # the copier's CPU (all its threads) over the same span, when measured

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us(self) -> float:
        """CPU microseconds a copied record: holds within ~10 % where the rate swings 1.6x with the load."""
        return 1e6 * self.cpu_s / self.records if self.records else float("nan")


def process_cpu_s(pid: int) -> float:
    """A process's CPU seconds so far, all its threads (/proc)."""
    utime, stime = stat_ticks(Path(f"/proc/{pid}/stat"))
    return (utime + stime) / CLOCK_TICKS


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
        self.create_topics(self.east_admin, self.topics)
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

    def create_topics(self, admin: AdminClient, names: list[str]) -> None:
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
            future.result(60)

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

    def time_copy(self, name: str, prefix: str, cpu: Callable[[], float] | None = None) -> Run:
        """The copy into the remote topics named `prefix`…, from its first record to its last; `cpu`:
        the copier's CPU seconds so far, read at both ends."""
        expected = self.expected
        deadline = time.monotonic() + DEADLINE_S
        first_at, first_count, first_cpu = None, 0, 0.0
        while time.monotonic() < deadline:
            count = self.remote_total(prefix)
            now = time.monotonic()
            if first_at is None and count > 0:
                first_at, first_count = now, count
                first_cpu = cpu() if cpu is not None else 0.0
            if count >= expected:
                seconds = now - (first_at or now)
                run = Run(name, expected - first_count, seconds,
                          cpu() - first_cpu if cpu is not None else float("nan"))
                LOG.info("%s copied %d records in %.2f s: %.0f rec/s, %.2f us of CPU a record", name,
                         run.records, seconds, run.rate, run.cpu_us)
                return run
            time.sleep(0.1)
        raise TimeoutError(f"{name} did not copy {expected} records within {DEADLINE_S:.0f} s")

    def ceiling(self, fetch_queue_backoff_ms: int | None = None, repetition: int = 0) -> Run:
        """A bare consume -> produce loop: the most a single Python process can move. With librdkafka's
        defaults (the line's ceiling since it was first run) its consumer waits 1 s
        (fetch.queue.backoff.ms) whenever its prefetch queue is full, which the driver no longer does;
        `fetch_queue_backoff_ms` gives the pipe the driver's setting, a ceiling the driver cannot beat.
        Its CPU is this process's from the first record read to the last one acknowledged."""
        name = "pipe" if fetch_queue_backoff_ms is None else f"pipe{fetch_queue_backoff_ms}"
        name += f"r{repetition}" if repetition else ""
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
        expected, copied, began, cpu_began = self.expected, 0, None, 0.0
        deadline = time.monotonic() + DEADLINE_S
        while copied < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} copied {copied} of {expected} records in {DEADLINE_S:.0f} s")
            for message in consumer.consume(POLL_BATCH, timeout=POLL_TIMEOUT_S):
                if message.error() is not None:
                    continue
                if began is None:
                    began, cpu_began = time.monotonic(), time.process_time()
                produce_waiting(producer, f"{name}.{message.topic()}", message)
                copied += 1
            producer.poll(0)
        producer.flush(120)
        seconds = time.monotonic() - (began or time.monotonic())
        run = Run(name, copied, seconds, time.process_time() - cpu_began)
        consumer.close()
        LOG.info("%s copied %d records in %.2f s: %.0f rec/s, %.2f us of CPU a record", name, run.records,
                 run.seconds, run.rate, run.cpu_us)
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

    def start_driver(self, latency_topic: str, source: str, target: str,
                     checkout: Path | None = None) -> ManagedProcess:
        """This checkout's driver, or another's (`checkout`, with its own .venv)."""
        path = srm_properties.write(self.workdir / f"srm-{source}.properties",
                                    {source: self.east, target: self.west},
                                    [(source, target)], "redis://127.0.0.1:1/0", {
                                        "topics": f"bench{self.tag}-.*|{latency_topic}",
                                        "emit.heartbeats.enabled": "false",
                                        "emit.checkpoints.enabled": "false",
                                        "refresh.topics.interval.seconds": 5, "metrics.period": 5})
        name = "driver" if checkout is None else "base"
        return driver_process(f"{name}-{source}", path, self.workdir, checkout).start()

    def start_mm2(self, latency_topic: str, source: str, target: str) -> ManagedProcess:
        path = self.workdir / f"mm2-{source}.properties"
        settings = {
            "clusters": f"{source}, {target}", f"{source}.bootstrap.servers": self.east,
            f"{target}.bootstrap.servers": self.west, f"{source}->{target}.enabled": "true",
            f"{target}->{source}.enabled": "false",
            f"{source}->{target}.topics": f"bench{self.tag}-.*|{latency_topic}", "tasks.max": "1",
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
        return ManagedProcess(f"mm2-{source}", command, self.workdir / f"mm2-{source}.log").start()


def driver_process(name: str, config: Path, workdir: Path, checkout: Path | None = None) -> ManagedProcess:
    """`python -m driver` of this checkout, or of another one (`checkout`, with its own .venv)."""
    if checkout is None:
        return ManagedProcess.python_module(name, "driver", ["--config", str(config)], workdir)
    # -P: the other checkout's packages, not this one's from the working directory
    command = [str(checkout / ".venv/bin/python"), "-P", "-m", "driver", "--config", str(config)]
    return ManagedProcess(name, command, workdir / f"{name}.log", {"PYTHONPATH": str(checkout)})


def produce_waiting(producer: Producer, topic: str, message: Message) -> None:
    """A copy of `message` (partition, key, value, timestamp, headers) into `topic`; while the producer's
    queue is full, serves its delivery reports and tries again."""
    while True:
        try:
            producer.produce(topic, message.value(), message.key(), cast(int, message.partition()),
                             timestamp=message.timestamp()[1], headers=message.headers())
            return
        except BufferError:
            producer.poll(0.1)


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


@dataclass
class Replicator:
    """One system of the line: how it starts, its aliases, and its runs (one per repetition)."""

    name: str
    start: Callable[..., ManagedProcess] | None  # None: a pipe, run in this process
    aliases: tuple[str, str]
    runs: list[Run]
    p50: list[float]
    p99: list[float]


def measure(bench: Bench, latency_seconds: float, compare_driver: Path | None = None, repeat: int = 1) -> str:
    """Every system once a repetition, in an order that rotates between repetitions, so that neither a
    pipe nor a replicator always runs on the emptier or the busier machine; medians of the repetitions.
    Each repetition copies into remote topics of its own (new aliases) and loads a latency topic of its
    own."""
    systems = [Replicator("pipe", None, ("", ""), [], [], []),
               Replicator("tuned_pipe", None, ("", ""), [], [], []),
               Replicator("driver", bench.start_driver, ("east", "west"), [], [], []),
               Replicator("mm2", bench.start_mm2, ("src", "dst"), [], [], [])]
    if compare_driver is not None:
        systems.insert(3, Replicator("base", functools.partial(bench.start_driver, checkout=compare_driver),
                                     ("ebase", "wbase"), [], [], []))
    for rep in range(repeat):
        for system in systems[rep % len(systems):] + systems[:rep % len(systems)]:
            if system.start is None:
                backoff = DRIVER_FETCH_QUEUE_BACKOFF_MS if system.name == "tuned_pipe" else None
                system.runs.append(bench.ceiling(backoff, rep))
                continue
            source, target = (f"{alias}{rep or ''}" for alias in system.aliases)
            lat_topic = f"lat{bench.tag}-{system.name}{rep}"
            bench.create_topics(bench.east_admin, [lat_topic])
            process = system.start(lat_topic, source, target)
            try:
                pid = cast(subprocess.Popen, process.process).pid
                cpu = functools.partial(process_cpu_s, pid)
                system.runs.append(bench.time_copy(system.name, f"{source}.", cpu))
                samples = bench.latency(lat_topic, f"{source}.{lat_topic}", latency_seconds)
            finally:
                process.stop()
            system.p50.append(percentile(samples, 0.5))
            system.p99.append(percentile(samples, 0.99))
            LOG.info("%s latency over %d records: p50 %.1f ms, p99 %.1f ms, mean %.1f ms", system.name,
                     len(samples), system.p50[-1], system.p99[-1], statistics.fmean(samples or [0.0]))
    return line_8(bench, {system.name: system for system in systems})


def line_8(bench: Bench, systems: dict[str, Replicator]) -> str:
    """The printed figures: per system its rates, CPU a record and latency by repetition; the last line
    the medians of the per-repetition ratios (a repetition's runs are neighbours in time)."""
    for system in systems.values():
        print(f"{system.name}: rec/s {[round(r.rate) for r in system.runs]}, CPU us a record "
              f"{[round(r.cpu_us, 2) for r in system.runs]}"
              + (f", p50 ms {[round(v, 1) for v in system.p50]}, p99 ms {[round(v, 1) for v in system.p99]}"
                 if system.p99 else ""))
    driver = systems["driver"]

    def ratio(other: str, cpu: bool = False) -> float:
        pairs = zip(driver.runs, systems[other].runs, strict=True)
        return statistics.median(o.cpu_us / d.cpu_us if cpu else d.rate / o.rate for d, o in pairs)

    mm2 = systems["mm2"]
    print(f"records per system: {driver.runs[0].records}; medians: driver "
          f"{statistics.median(r.rate for r in driver.runs):.0f} rec/s, mm2 "
          f"{statistics.median(r.rate for r in mm2.runs):.0f} rec/s, tuned pipe "
          f"{statistics.median(r.rate for r in systems['tuned_pipe'].runs):.0f} rec/s; "
          f"p50 ms driver {statistics.median(driver.p50):.1f} mm2 {statistics.median(mm2.p50):.1f}")
    line = (f"driver_vs_mm2_throughput={ratio('mm2'):.2f} driver_vs_ceiling={ratio('pipe'):.2f} "
            f"driver_vs_tuned_pipe={ratio('tuned_pipe'):.2f} "
            f"p99_ms_driver={statistics.median(driver.p99):.1f} p99_ms_mm2={statistics.median(mm2.p99):.1f} "
            f"cpu_us_driver={statistics.median(r.cpu_us for r in driver.runs):.2f} "
            f"cpu_us_tuned_pipe={statistics.median(r.cpu_us for r in systems['tuned_pipe'].runs):.2f} "
            f"driver_vs_tuned_pipe_cpu={ratio('tuned_pipe', cpu=True):.2f}")
    if "base" in systems:
        base = systems["base"]
        line += (f" driver_vs_base_throughput={ratio('base'):.2f} "
                 f"p99_ms_base={statistics.median(base.p99):.1f} "
                 f"cpu_us_base={statistics.median(r.cpu_us for r in base.runs):.2f}")
    return line


def broker_heap(scale: bool, min_heap: str | None, workdir: Path) -> list[str]:
    """The local brokers' JVM options: at `--scale` 1 GB, as thousands of partitions and their copies
    outgrow the stack's 384 MB; started at that size (`-Xms`) unless told otherwise, so that the heap's
    growth (full collections of about a second) falls before the measured copies and latency loads, not
    inside one of them. Each broker logs its collections into the bench's folder (gc-<pid>.log), to read
    a copy's rate against its brokers' pauses."""
    max_heap = "1g" if scale else next(o[4:] for o in kafka_cluster.HEAP_OPTS if o.startswith("-Xmx"))
    kept = [o for o in kafka_cluster.HEAP_OPTS if not o.startswith(("-Xms", "-Xmx"))]
    return [f"-Xms{min_heap or max_heap}", f"-Xmx{max_heap}", *kept,
            f"-Xlog:gc:file={workdir}/gc-%p.log:time,uptime"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per value size")
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument("--bootstraps", help="east=host:port,west=host:port of running clusters")
    parser.add_argument("--scale", action="store_true",
                        help="one topic of 1,000 partitions instead (bench/replication_scale.py)")
    parser.add_argument("--tasks-max", default="1,4", help="--scale: tasks.max values, one line each")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (medians)")
    parser.add_argument("--first-repetition", type=int, default=0,
                        help="--scale: number the repetitions from this one (the order of the "
                             "replicators rotates with it), to split one line over several calls")
    parser.add_argument("--modes", default="alo,eos",
                        help="--scale: alo (at least once), eos (exactly once) or both, to split a line")
    parser.add_argument("--compare-driver", type=Path,
                        help="also run the driver of this checkout (with its own .venv), e.g. the code "
                             "before a change")
    parser.add_argument("--driver-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="--scale: a property for this checkout's driver only (not --compare-driver's), "
                             "e.g. replication.producers.max=8; repeatable")
    parser.add_argument("--broker-min-heap", default=None,
                        help="the local brokers' -Xms (default: their -Xmx, so that no copy pays for "
                             "growing a broker's heap; e.g. 128m for the stack's setting)")
    parser.add_argument("--latency-rate", type=int, default=LATENCY_RATE,
                        help="--scale: records/s the latency load asks for (default %(default)s)")
    parser.add_argument("--latency-load", choices=("uniform", "sticky"), default="uniform",
                        help="--scale: the latency load over every partition in turn (round robin), or "
                             "the perf producer's sticky partitioner (the method before s28: ~30 of the "
                             "1,000 partitions active a second)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="--scale: no unmeasured copy of the preloaded topic before the first "
                             "measured one")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="srm-bench-replication-"))
    clusters = None
    if args.bootstraps:
        bootstraps = dict(item.split("=", 1) for item in args.bootstraps.split(","))
    else:
        kafka_cluster.HEAP_OPTS = broker_heap(args.scale, args.broker_min_heap, workdir)
        clusters = KafkaClusters(["east", "west"], workdir / "kafka").start()
        bootstraps = {alias: clusters.bootstrap(alias) for alias in ("east", "west")}
    try:
        if args.scale:
            from bench.replication_scale import ScaleBench, measure_scale
            scale_bench = ScaleBench(bootstraps["east"], bootstraps["west"], args.records, workdir,
                                     args.compare_driver)
            scale_bench.modes = tuple(mode == "eos" for mode in args.modes.split(","))
            scale_bench.warm_up_first = not args.no_warm_up
            scale_bench.latency_load = args.latency_load
            scale_bench.latency_rate = args.latency_rate
            for setting in args.driver_setting:
                key, sep, value = setting.partition("=")
                if not sep or not key:
                    parser.error(f"--driver-setting takes KEY=VALUE, not {setting!r}")
                scale_bench.driver_settings[key.strip()] = value.strip()
            if clusters is not None:
                scale_bench.broker_pids = {alias: cast(subprocess.Popen, clusters[alias].process).pid
                                           for alias in ("east", "west")}
            line = measure_scale(scale_bench, args.latency_seconds,
                                 [int(v) for v in args.tasks_max.split(",")], args.repeat,
                                 args.first_repetition)
        else:
            bench = Bench(bootstraps["east"], bootstraps["west"], args.records, workdir)
            bench.preload()
            line = measure(bench, args.latency_seconds, args.compare_driver, args.repeat)
    finally:
        if clusters is not None:
            clusters.cleanup()
    LOG.info("logs in %s", workdir)
    print(line)


if __name__ == "__main__":
    main()
