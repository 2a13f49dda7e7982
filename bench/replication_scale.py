"""`bench/replication.py --scale`: the driver and MM2 over one topic of 1,000 partitions.

N records of 1 KB are preloaded into one 1,000-partition topic on east; what the topic then holds is
counted (Kafka's perf producer may lose a few) and is what every copy must reach. The topic is copied
to west by `python -m driver` and by MM2 in dedicated mode, each without and with exactly-once (the
driver's `exactly.once = true`; MM2's `exactly.once.source.support = enabled`, KIP-618, with its internal
REST server as dedicated mode needs for it), at each ``tasks.max`` asked (1 and 4 by default, the same
for both), ``--repeat`` times, interleaved: within a repetition every replicator copies once in each
mode before the next repetition starts, and the replicators' order rotates between repetitions. Every
copy uses cluster aliases of its own for the same brokers, so remote topics, progress and groups never
meet; its remote and internal topics are deleted after it (thousands of partitions would otherwise
pile up in the brokers).

Throughput counts from the first copied record to the last: end offsets of the remote topic at least
once; in exactly-once runs the progress committed with the records (`mm2-offsets.<alias>.internal`,
MM2's Connect format, written by both), since end offsets there also count transaction markers. Latency:
after each at-least-once copy, 20k records/s of 100 B (`--latency-rate`) into a second 1,000-partition
topic, round robin over its partitions (`--latency-load sticky`: the perf producer's default partitioner
instead), emptied by `DeleteRecords` before each replicator starts, so it starts at its end; arrival on
west minus CreateTime, until every record of the load arrived. The rate the perf producer reached is
logged and printed (`load_rps_…`, from its own summary): on a host too small for the asked rate it sends
what the brokers and the replicator leave it, so replicators are compared at the loads they allowed.
The driver's peak RSS and thread count are sampled from /proc throughout its runs; `assign_s` is the
slowest of its runs from process start to its log naming all 1,000 partitions assigned (`assign_s_base`
the same of the compared driver). Before
each replicator starts, both brokers serve a topic created then (`settle`). Every wait is bounded and
ends with a message naming what did not happen.

`--compare-driver PATH` adds a third replicator: the driver of another checkout (its own `.venv`), run
the same way in the same repetitions, e.g. the code before a change. `--driver-setting KEY=VALUE` adds a
property to this checkout's driver only (with `--compare-driver` naming this checkout: a setting against
its default, the same code).

One line per ``tasks.max``, each the median over the repetitions (per-repetition ratios are logged):
`tasks_max=… driver_vs_mm2_throughput=… driver_vs_mm2_throughput_eos=… p50_ms_driver=… p50_ms_mm2=…
p99_ms_driver=… p99_ms_mm2=… driver_rss_mb=… driver_threads=… assign_s=… load_rps_driver=… load_rps_mm2=…`
(with `--compare-driver` also `driver_vs_base_throughput=… driver_vs_base_throughput_eos=… p50_ms_base=…
p99_ms_base=… assign_s_base=… load_rps_base=…`).
"""

from __future__ import annotations

import json
import logging
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from bench.replication import (
    LATENCY_RATE,
    PIPE_PRODUCER,
    POLL_BATCH,
    POLL_TIMEOUT_S,
    Bench,
    Run,
    driver_process,
    finish,
    percentile,
    process_cpu_s,
    produce_waiting,
    wait_for_topic,
)
from stack import srm_properties
from stack.jars import kafka_jars
from stack.kafka_cluster import LOG4J2, free_port
from stack.prerequisites import require
from stack.processes import ManagedProcess

LOG = logging.getLogger("bench.replication.scale")

PARTITIONS = 1000
SIZE = 1024
FIRST_RECORD_S = 240.0  # from a replicator's start to its first copied record
STALL_S = 120.0  # a copy whose count does not move for this long has stalled
PRELOAD_S = 600.0
ADMIN_S = 60.0
# The latency load's records still missing this long after the load ended are left out (and logged).
ARRIVAL_S = 30.0
# Kafka's perf producer at 20k records/s: its default (sticky) partitioner fills one partition's batch
# before it moves on, so only ~30 of the 1,000 partitions got records in any second, in bursts of ~600;
# round robin gives every partition a record every 50 ms, as 1,000 partitions reporting steadily do.
LATENCY_LOADS: dict[str, list[str] | None] = {
    "uniform": ["linger.ms=5", "batch.size=65536",
                "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"],
    "sticky": None}  # the perf producer's defaults of bench/replication.py (the method before s28)
PRELOAD_PRODUCER = ["linger.ms=100", "batch.size=65536", "buffer.memory=134217728"]
# The perf producer's summary line: what the latency load reached.
LOAD_SUMMARY = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec", re.MULTILINE)
ASSIGNED = re.compile(r"^(\S+ \S+) INFO driver\.replication: \S+ assigned (.*)$")


@dataclass
class Figures:
    """One replicator's runs at one tasks.max: a rate per repetition and mode, latency per repetition."""

    alo: list[float] = field(default_factory=list)
    eos: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    load_rps: list[float] = field(default_factory=list)  # the rate the latency load reached


class ScaleBench(Bench):
    def __init__(self, east: str, west: str, records: int, workdir: Path,
                 compare_driver: Path | None = None) -> None:
        super().__init__(east, west, records, workdir)
        self.topic = f"scale{self.tag}"
        self.latency_topic = f"{self.topic}lat"
        self.compare_driver = compare_driver
        self.expected = 0  # what the source topic holds after the preload
        self.peak_rss_mb, self.peak_threads, self.assign_s, self.assign_s_base = 0.0, 0, 0.0, 0.0
        self.runs = 0
        self.modes: tuple[bool, ...] = (False, True)  # exactly once or not; `--modes` runs one alone
        self.warm_up_first = True  # an unmeasured copy of the preloaded topic before the measured ones
        self.latency_load = "uniform"  # a key of LATENCY_LOADS
        self.driver_settings: dict[str, str] = {}  # added to this checkout's driver's properties only
        self.broker_pids: dict[str, int] = {}  # the local brokers (east, west): their CPU a copy is logged
        self.replicator_pid: int | None = None  # the replicator running now: its CPU is logged beside theirs
        self.latency_rate = LATENCY_RATE  # records/s the latency load asks for
        self.last_load_rps = float("nan")  # the rate the last latency load reached

    def preload_scale(self) -> None:
        names = [self.topic, self.latency_topic]
        for future in self.east_admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
            future.result(120)
        began = time.monotonic()
        # Lingering fills the batches of 1,000 partitions: fewer, fuller requests than the default. The
        # buffer holds a batch of every partition at once (1,000 x 64 KB of 128 MB).
        finish(self.perf_producer(self.topic, self.records, SIZE, -1, PRELOAD_PRODUCER), PRELOAD_S,
               f"preload of {self.topic}")
        self.expected = source_count(self.east_admin, self.topic)
        LOG.info("preloaded %d x %d B into %s (%d partitions) in %.1f s; it holds %d", self.records, SIZE,
                 self.topic, PARTITIONS, time.monotonic() - began, self.expected)
        if self.expected < self.records * 0.99:
            raise RuntimeError(f"the perf producer lost {self.records - self.expected} of {self.records} "
                               f"records: see {self.workdir}/perf-{self.topic}.log")
        if self.warm_up_first:
            self.warm_up()

    def warm_up(self) -> None:
        """One unmeasured copy of the whole preloaded topic into a topic of west, by a bare consume ->
        produce loop here, then deleted: both brokers serve a full copy before the first measured one.
        Without it the first copy of a call, whichever replicator made it, was the first to read the
        preloaded logs and to write on west, and ran at a fraction of the later copies' rate with the
        brokers spending twice their CPU a record (bench/RESULTS.md)."""
        began = time.monotonic()
        name = f"warmup.{self.topic}"
        for future in self.west_admin.create_topics([NewTopic(name, PARTITIONS, 1)],
                                                    operation_timeout=ADMIN_S).values():
            future.result(ADMIN_S)
        consumer = Consumer({"bootstrap.servers": self.east, "group.id": f"bench-{name}",
                             "enable.auto.commit": False, "fetch.queue.backoff.ms": 50})
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        producer = Producer({"bootstrap.servers": self.west, **PIPE_PRODUCER})
        copied, moved_at = 0, time.monotonic()
        try:
            while copied < self.expected:
                messages = consumer.consume(POLL_BATCH, timeout=POLL_TIMEOUT_S)
                for message in messages:
                    if message.error() is None:
                        produce_waiting(producer, name, message)
                        copied += 1
                producer.poll(0)
                if messages:
                    moved_at = time.monotonic()
                elif time.monotonic() - moved_at > STALL_S:
                    raise TimeoutError(f"the warm-up copy stalled at {copied} of {self.expected} records "
                                       f"(nothing read for {STALL_S:.0f} s)")
            left = producer.flush(STALL_S)
            if left:
                raise TimeoutError(f"the warm-up copy's producer still held {left} records after "
                                   f"{STALL_S:.0f} s")
        finally:
            consumer.close()
        for future in self.west_admin.delete_topics([name], operation_timeout=ADMIN_S).values():
            future.result(ADMIN_S)
        LOG.info("warm-up: copied %d records into %s (unmeasured) in %.1f s", copied, name,
                 time.monotonic() - began)

    # --- counting copies -------------------------------------------------------------------------

    def time_scale_copy(self, name: str, count: Callable[[], int]) -> Run:
        started = time.monotonic()
        first_at, first_count, last_count, moved_at = None, 0, -1, started
        brokers_cpu: dict[str, float] = {}
        while True:
            copied = count()
            now = time.monotonic()
            if copied != last_count:
                last_count, moved_at = copied, now
            if first_at is None and copied > 0:
                first_at, first_count = now, copied
                brokers_cpu = self.brokers_cpu()
            if copied >= self.expected:
                run = Run(name, self.expected - first_count, now - (first_at or now))
                spent = {alias: cpu - brokers_cpu.get(alias, cpu)
                         for alias, cpu in self.brokers_cpu().items()}
                LOG.info("%s copied %d records in %.2f s: %.0f rec/s; CPU over it: %s", name,
                         run.records, run.seconds, run.rate,
                         ", ".join(f"{alias} {cpu:.1f} s" for alias, cpu in spent.items()) or "not read")
                return run
            if first_at is None and now - started > FIRST_RECORD_S:
                raise TimeoutError(f"{name} copied no record within {FIRST_RECORD_S:.0f} s of its start")
            if first_at is not None and now - moved_at > STALL_S:
                raise TimeoutError(f"{name} stalled at {copied} of {self.expected} records "
                                   f"(nothing more for {STALL_S:.0f} s)")
            time.sleep(0.2)

    def brokers_cpu(self) -> dict[str, float]:
        """The local brokers' CPU seconds so far (all threads), by alias (none for clusters not ours),
        and the running replicator's (the driver's or MM2's process) as `replicator`."""
        pids = dict(self.broker_pids)
        if self.replicator_pid is not None:
            pids["replicator"] = self.replicator_pid
        try:
            return {alias: process_cpu_s(pid) for alias, pid in pids.items()}
        except OSError:  # a broker gone: the copy fails on its own
            return {}

    # --- the runs --------------------------------------------------------------------------------

    def aliases(self) -> tuple[str, str]:
        """A new pair of aliases, with the remote topics created beforehand for the replicator to find:
        their end offsets are then readable from the first copied record on (while a topic of 1,000
        partitions is being created, one read of them waits out its timeout, and a whole copy fitted in
        that wait). Then both brokers settle (`settle`)."""
        self.runs += 1
        source, target = f"s{self.runs}", f"t{self.runs}"
        remotes = [NewTopic(f"{source}.{t}", PARTITIONS, 1) for t in (self.topic, self.latency_topic)]
        for future in self.west_admin.create_topics(remotes, operation_timeout=ADMIN_S).values():
            future.result(ADMIN_S)
        deadline = time.monotonic() + ADMIN_S
        while not all(leaders_ready(self.west_admin, t.topic) for t in remotes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the remote topics of {source} have no leaders after {ADMIN_S:.0f} s")
            time.sleep(0.5)
        settle(self.east_admin, f"settle.{target}")  # named so that delete_topics takes them
        settle(self.west_admin, f"settle.{source}")
        return source, target

    def driver_run(self, exactly_once: bool, tasks_max: int, latency_s: float,
                   checkout: Path | None = None) -> tuple[Run, list[float]]:
        source, target = self.aliases()
        path = srm_properties.write(
            self.workdir / f"srm-{source}.properties", {source: self.east, target: self.west},
            [(source, target)], "redis://127.0.0.1:1/0", {
                "topics": f"{self.topic}|{self.latency_topic}", "exactly.once": str(exactly_once).lower(),
                "tasks.max": tasks_max, "emit.heartbeats.enabled": "false",
                "emit.checkpoints.enabled": "false", "refresh.topics.interval.seconds": 5,
                "metrics.period": 5, **(self.driver_settings if checkout is None else {})})
        base = "base" if checkout is not None else "driver"
        name = f"{base}-{'eos' if exactly_once else 'alo'}-{source}"
        process = driver_process(name, path, self.workdir, checkout)
        started, sampling = time.time(), threading.Event()
        if not exactly_once:
            self.empty_latency_topic()
        process.start()
        self.replicator_pid = process.process.pid if process.process is not None else None
        sampler = threading.Thread(target=self._sample, args=(process, sampling, checkout is None),
                                   daemon=True)
        sampler.start()
        try:
            run, samples = self.measure(name, source, exactly_once, latency_s)
        finally:
            self.replicator_pid = None
            sampling.set()
            sampler.join(5)
            process.stop()
            self.delete_topics(source, target)
        assigned = assigned_after(process.log_file, started, self.topic)
        if checkout is None:
            self.assign_s = max(self.assign_s, assigned)
        else:
            self.assign_s_base = max(self.assign_s_base, assigned)
        return run, samples

    def mm2_run(self, exactly_once: bool, tasks_max: int, latency_s: float) -> tuple[Run, list[float]]:
        source, target = self.aliases()
        settings = {
            "clusters": f"{source}, {target}", f"{source}.bootstrap.servers": self.east,
            f"{target}.bootstrap.servers": self.west, f"{source}->{target}.enabled": "true",
            f"{target}->{source}.enabled": "false",
            f"{source}->{target}.topics": f"{self.topic}|{self.latency_topic}", "tasks.max": str(tasks_max),
            "emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false",
            "sync.topic.acls.enabled": "false", "refresh.topics.interval.seconds": "5",
            "replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1", "checkpoints.topic.replication.factor": "1",
            "config.storage.replication.factor": "1", "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1"}
        if exactly_once:
            settings.update({f"{target}.exactly.once.source.support": "enabled",
                             f"{source}.consumer.isolation.level": "read_committed",
                             "dedicated.mode.enable.internal.rest": "true",
                             "listeners": f"http://127.0.0.1:{free_port()}"})
        path = self.workdir / f"mm2-{source}.properties"
        path.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        name = f"mm2-{'eos' if exactly_once else 'alo'}-{source}"
        command = [require("java"), "-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={LOG4J2}", "-cp",
                   f"{kafka_jars()}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(path)]
        if not exactly_once:
            self.empty_latency_topic()
        process = ManagedProcess(name, command, self.workdir / f"{name}.log").start()
        self.replicator_pid = process.process.pid if process.process is not None else None
        try:
            return self.measure(name, source, exactly_once, latency_s)
        finally:
            self.replicator_pid = None
            process.stop()
            self.delete_topics(source, target)

    def measure(self, name: str, source: str, exactly_once: bool,
                latency_s: float) -> tuple[Run, list[float]]:
        """The copy's timing (with exactly-once, through the progress topic) and, at least once, the
        latency of a steady load on the latency topic."""
        remote = f"{source}.{self.topic}"
        if exactly_once:
            tracker = ProgressTracker(self.west, f"mm2-offsets.{source}.internal")
            try:
                return self.time_scale_copy(name, tracker.total), []
            finally:
                tracker.close()
        run = self.time_scale_copy(name, lambda: end_offsets(self.west_admin, remote))
        return run, self.scale_latency(f"{source}.{self.latency_topic}", latency_s)

    def empty_latency_topic(self) -> None:
        """The next replicator starts at the latency topic's end: earlier loads are not copied again."""
        ends = {TopicPartition(self.latency_topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        marks = [TopicPartition(tp.topic, tp.partition, f.result().offset)
                 for tp, f in self.east_admin.list_offsets(ends, request_timeout=ADMIN_S).items()]
        for future in self.east_admin.delete_records([tp for tp in marks if tp.offset > 0],
                                                     request_timeout=ADMIN_S).values():
            future.result(ADMIN_S)

    def delete_topics(self, source: str, target: str) -> None:
        """A copy's remote and internal topics: a thousand partitions each, and their files, released."""
        for admin, alias in ((self.west_admin, source), (self.east_admin, target)):
            try:
                names = [t for t in admin.list_topics(timeout=ADMIN_S).topics if alias in t.split(".")]
                if names:
                    for future in admin.delete_topics(names, operation_timeout=ADMIN_S).values():
                        future.result(ADMIN_S)
            except KafkaException as exc:  # left behind: costs the brokers memory, not the figures
                LOG.warning("could not delete the topics of %s: %s", alias, exc)

    def scale_latency(self, remote: str, seconds: float) -> list[float]:
        """Arrival on west minus CreateTime of a steady load of 100 B records into the latency topic,
        spread over every partition (`latency_load`); sampled until every record of the load arrived,
        so a replicator's slowest records count too (bounded by `ARRIVAL_S` after the load's end)."""
        consumer = Consumer({"bootstrap.servers": self.west, "group.id": f"bench-lat-{remote}",
                             "enable.auto.commit": False})
        wait_for_topic(self.west_admin, remote)
        ends = [consumer.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1]
                for p in range(PARTITIONS)]
        consumer.assign([TopicPartition(remote, p, end) for p, end in enumerate(ends)])
        samples: list[float] = []
        count = int(self.latency_rate * seconds)
        load = self.perf_producer(self.latency_topic, count, 100, self.latency_rate,
                                  LATENCY_LOADS[self.latency_load])
        brokers_cpu, began = self.brokers_cpu(), time.monotonic()
        warm_until = time.time() * 1000 + 2000
        load_deadline = time.monotonic() + seconds + 60
        arrived, load_ended = 0, None
        while arrived < count and (load_ended is None or time.monotonic() - load_ended < ARRIVAL_S):
            if load_ended is None and load.poll() is not None:
                load_ended = time.monotonic()
            if load_ended is None and time.monotonic() > load_deadline:
                finish(load, 0, f"latency load into {self.latency_topic}")
            # What is fetched at once, else the first record only: a batch consume would stamp every
            # record with the time its batch filled (bench/replication.py's latency()).
            messages = consumer.consume(POLL_BATCH, timeout=0) or consumer.consume(1, timeout=POLL_TIMEOUT_S)
            for message in messages:
                if message.error() is None:
                    arrived += 1
                    if message.timestamp()[1] > warm_until:
                        samples.append(time.time() * 1000 - message.timestamp()[1])
        consumer.close()
        spent = {alias: cpu - brokers_cpu.get(alias, cpu) for alias, cpu in self.brokers_cpu().items()}
        self.last_load_rps = self.load_reached(count)
        LOG.info("latency load (%s) of %d records into %s at %.0f rec/s asked, %.0f reached: %d arrived in "
                 "%.1f s; CPU over it: %s", self.latency_load, count, remote, self.latency_rate,
                 self.last_load_rps, arrived, time.monotonic() - began,
                 ", ".join(f"{alias} {cpu:.1f} s" for alias, cpu in spent.items()) or "not read")
        if not samples:
            raise RuntimeError(f"no latency sample arrived in {remote}")
        return samples

    def load_reached(self, count: int) -> float:
        """The records/s of the last latency load, from the perf producer's summary (NaN if it has none:
        the load was cut short)."""
        try:
            text = (self.workdir / f"perf-{self.latency_topic}.log").read_text(errors="replace")
        except OSError:
            return float("nan")
        summaries = [m for m in LOAD_SUMMARY.finditer(text) if int(m[1]) == count]
        return float(summaries[-1][2]) if summaries else float("nan")

    def _sample(self, process: ManagedProcess, stop: threading.Event, counted: bool) -> None:
        while not stop.wait(0.5):
            pid = process.process.pid if process.process is not None else None
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except (OSError, TypeError):
                continue
            if not counted:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            self.peak_rss_mb = max(self.peak_rss_mb, int(fields["VmRSS"].split()[0]) / 1024)
            self.peak_threads = max(self.peak_threads, int(fields["Threads"]))


def settle(admin: AdminClient, name: str) -> None:
    """Waits until the broker serves a topic created now. A broker applies topic changes in order, and
    the 2,000-partition topics created and deleted around each copy kept it busy for seconds after their
    leaders showed: a replicator starting then waited that long for the topics it creates itself (its
    progress topic), which `assign_s` counted as the replicator's own time."""
    began = time.monotonic()
    for future in admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=ADMIN_S).values():
        future.result(ADMIN_S)
    while True:
        metadata = admin.list_topics(name, timeout=10).topics.get(name)
        if metadata is not None and metadata.error is None and all(
                p.leader >= 0 for p in metadata.partitions.values()) and metadata.partitions:
            break
        if time.monotonic() - began > PRELOAD_S:
            raise TimeoutError(f"the broker did not serve {name} within {PRELOAD_S:.0f} s")
        time.sleep(0.2)
    LOG.info("%s served after %.1f s", name, time.monotonic() - began)


def leaders_ready(admin: AdminClient, topic: str) -> bool:
    metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
    return (metadata is not None and metadata.error is None and len(metadata.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in metadata.partitions.values()))


def source_count(admin: AdminClient, topic: str) -> int:
    """What the preloaded topic holds: its end offsets, read until every partition answers (a broker
    still busy with the preload may fail a read), within `ADMIN_S`."""
    requests = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    deadline = time.monotonic() + ADMIN_S
    while True:
        try:
            futures = admin.list_offsets(requests, request_timeout=30)
            return sum(future.result().offset for future in futures.values())
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the end offsets of {topic} were not readable within {ADMIN_S:.0f} s "
                                   f"of the preload: {exc}") from None
            LOG.info("end offsets of %s not read yet: %s", topic, exc)
            time.sleep(1)


def end_offsets(admin: AdminClient, topic: str) -> int:
    """The sum of the topic's end offsets; 0 while it does not exist or has no leaders yet."""
    if topic not in admin.list_topics(timeout=10).topics:
        return 0
    requests = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    try:
        futures = admin.list_offsets(requests, request_timeout=30)
        return sum(future.result().offset for future in futures.values())
    except KafkaException:  # leaders not elected yet
        return 0


class ProgressTracker:
    """The committed progress of one replication (MM2's Connect offsets): records copied so far."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.last: dict[int, int] = {}  # partition -> the offset its newest progress record names
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-progress-{topic}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
        self.assigned = False

    def total(self) -> int:
        if not self.assigned:
            metadata = self.consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if metadata is None or metadata.error is not None:
                return 0
            self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                                  for p in metadata.partitions])
            self.assigned = True
        while True:
            messages = self.consumer.consume(10_000, timeout=0.2)
            for message in messages:
                key, value = message.key(), message.value()
                if message.error() is not None or key is None or value is None:
                    continue
                try:
                    partition = json.loads(key)[1]["partition"]
                    self.last[partition] = json.loads(value)["offset"]
                except (ValueError, KeyError, IndexError, TypeError):
                    continue
            if len(messages) < 10_000:
                return sum(offset + 1 for offset in self.last.values())

    def close(self) -> None:
        self.consumer.close()


def assigned_after(log_file: Path, started: float, topic: str) -> float:
    """Seconds from `started` (epoch) to the driver's log line completing the assignment of every
    partition of `topic`."""
    seen: set[str] = set()
    for line in log_file.read_text(errors="replace").splitlines():
        found = ASSIGNED.match(line)
        if found is None:
            continue
        seen.update(part.split("@")[0] for part in found.group(2).split(", ") if part.startswith(f"{topic}["))
        if len(seen) >= PARTITIONS:
            at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return at - started
    return float("nan")


def repetition(bench: ScaleBench, tasks_max: int, latency_s: float, rep: int,
               figures: dict[str, Figures]) -> None:
    """Every replicator once in each mode; the order rotates with the repetition."""
    runners: dict[str, Callable[[bool], tuple[Run, list[float]]]] = {
        "driver": lambda eos: bench.driver_run(eos, tasks_max, latency_s),
        "mm2": lambda eos: bench.mm2_run(eos, tasks_max, latency_s)}
    if bench.compare_driver is not None:
        runners["base"] = lambda eos: bench.driver_run(eos, tasks_max, latency_s, bench.compare_driver)
    names = list(runners)
    order = names[rep % len(names):] + names[:rep % len(names)]
    for exactly_once in bench.modes:
        for name in order:
            run, samples = runners[name](exactly_once)
            got = figures.setdefault(name, Figures())
            (got.eos if exactly_once else got.alo).append(run.rate)
            if samples:
                got.p50.append(percentile(samples, 0.5))
                got.p99.append(percentile(samples, 0.99))
                got.load_rps.append(bench.last_load_rps)
                LOG.info("%s latency over %d records: p50 %.1f ms, p99 %.1f ms", name, len(samples),
                         got.p50[-1], got.p99[-1])


def ratios(ours: list[float], theirs: list[float]) -> list[float]:
    """Per-repetition ratios (the runs of one repetition are neighbours in time)."""
    return [a / b if b > 0 else float("nan") for a, b in zip(ours, theirs, strict=True)]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def scale_line(bench: ScaleBench, tasks_max: int, figures: dict[str, Figures]) -> str:
    driver, mm2 = figures["driver"], figures["mm2"]
    alo, eos = ratios(driver.alo, mm2.alo), ratios(driver.eos, mm2.eos)
    print(f"scale: tasks.max {tasks_max}, {PARTITIONS} partitions, {bench.expected} records of {SIZE} B, "
          f"{len(alo)} repetitions; rec/s at least once: "
          + "; ".join(f"{n} {[round(r) for r in f.alo]}" for n, f in figures.items())
          + "; exactly once: " + "; ".join(f"{n} {[round(r) for r in f.eos]}" for n, f in figures.items())
          + f"; driver/mm2 per repetition {[round(r, 2) for r in alo]}, eos {[round(r, 2) for r in eos]}"
          + "; p99 ms at the load's rec/s reached: " + "; ".join(
              f"{n} {[f'{p:.0f} @ {r:.0f}' for p, r in zip(f.p99, f.load_rps, strict=True)]}"
              for n, f in figures.items()))
    line = (f"tasks_max={tasks_max} driver_vs_mm2_throughput={median(alo):.2f} "
            f"driver_vs_mm2_throughput_eos={median(eos):.2f} "
            f"p50_ms_driver={median(driver.p50):.1f} p50_ms_mm2={median(mm2.p50):.1f} "
            f"p99_ms_driver={median(driver.p99):.1f} p99_ms_mm2={median(mm2.p99):.1f} "
            f"driver_rss_mb={bench.peak_rss_mb:.0f} driver_threads={bench.peak_threads} "
            f"assign_s={bench.assign_s:.1f} load_rps_driver={median(driver.load_rps):.0f} "
            f"load_rps_mm2={median(mm2.load_rps):.0f}")
    base = figures.get("base")
    if base is not None:
        line += (f" driver_vs_base_throughput={median(ratios(driver.alo, base.alo)):.2f} "
                 f"driver_vs_base_throughput_eos={median(ratios(driver.eos, base.eos)):.2f} "
                 f"p50_ms_base={median(base.p50):.1f} p99_ms_base={median(base.p99):.1f} "
                 f"assign_s_base={bench.assign_s_base:.1f} load_rps_base={median(base.load_rps):.0f}")
    return line


def measure_scale(bench: ScaleBench, latency_seconds: float, tasks_values: list[int], repeat: int,
                  first_repetition: int = 0) -> str:
    bench.preload_scale()
    lines = []
    for tasks_max in tasks_values:
        figures: dict[str, Figures] = {}
        bench.peak_rss_mb, bench.peak_threads, bench.assign_s, bench.assign_s_base = 0.0, 0, 0.0, 0.0
        for rep in range(first_repetition, first_repetition + repeat):
            repetition(bench, tasks_max, latency_seconds, rep, figures)
        lines.append(scale_line(bench, tasks_max, figures))
        LOG.info("%s", lines[-1])
    return "\n".join(lines)
