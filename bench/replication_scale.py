"""`bench/replication.py --scale`: the driver and MM2 over one topic of 1,000 partitions.

N records of 1 KB are preloaded into one 1,000-partition topic on east and copied to west four times:
by `python -m driver` (tasks.max = 1) and by MM2 in dedicated mode (tasks.max = 1), each without and
with exactly-once (the driver's `exactly.once = true`; MM2's `exactly.once.source.support = enabled`,
KIP-618, with its internal REST server as dedicated mode needs for it). Each run uses its own cluster
aliases for the same brokers, so remote topics, progress and groups never meet.

Throughput counts from the first copied record to the last, as the 8-partition line does: end offsets
of the remote topic at-least-once; in exactly-once runs the progress committed with the records
(`mm2-offsets.<alias>.internal`, MM2's Connect format, written by both), since end offsets there also
count transaction markers. The driver's peak RSS and thread count are sampled from /proc throughout
its runs; `assign_s` is the slower of its two runs from process start to its log naming all 1,000
partitions assigned. Latency: after the at-least-once copy, 20k records/s of 100 B into a second
1,000-partition topic of that replicator's own, arrival on west minus CreateTime.

Last line: `driver_vs_mm2_throughput=… driver_vs_mm2_throughput_eos=… p99_ms_driver=… p99_ms_mm2=…
driver_rss_mb=… driver_threads=… assign_s=…`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from datetime import datetime
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec

from bench.replication import LATENCY_RATE, POLL_BATCH, POLL_TIMEOUT_S, Bench, Run, percentile, wait_for_topic
from stack import srm_properties
from stack.jars import kafka_jars
from stack.kafka_cluster import LOG4J2, free_port
from stack.prerequisites import require
from stack.processes import ManagedProcess

LOG = logging.getLogger("bench.replication.scale")

PARTITIONS = 1000
SIZE = 1024
DEADLINE_S = 900.0
ASSIGNED = re.compile(r"^(\S+ \S+) INFO driver\.replication: \S+ assigned (.*)$")


class ScaleBench(Bench):
    def __init__(self, east: str, west: str, records: int, workdir: Path) -> None:
        super().__init__(east, west, records, workdir)
        self.topic = f"scale{self.tag}"
        self.peak_rss_mb, self.peak_threads, self.assign_s = 0.0, 0, 0.0

    def preload_scale(self) -> None:
        names = [self.topic, f"{self.topic}lat-driver", f"{self.topic}lat-mm2"]
        for future in self.east_admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names]).values():
            future.result(120)
        began = time.monotonic()
        self.perf_producer(self.topic, self.records, SIZE, -1).wait()
        LOG.info("preloaded %d x %d B into %s (%d partitions) in %.1f s", self.records, SIZE, self.topic,
                 PARTITIONS, time.monotonic() - began)

    # --- counting copies -------------------------------------------------------------------------

    def end_offsets(self, remote: str) -> int:
        if remote not in self.west_admin.list_topics(timeout=10).topics:
            return 0
        requests = {TopicPartition(remote, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        try:
            futures = self.west_admin.list_offsets(requests, request_timeout=30)
            return sum(future.result().offset for future in futures.values())
        except KafkaException:  # leaders not elected yet
            return 0

    def time_scale_copy(self, name: str, count: object) -> Run:
        deadline, first_at, first_count = time.monotonic() + DEADLINE_S, None, 0
        while time.monotonic() < deadline:
            copied = count()  # type: ignore[operator]
            now = time.monotonic()
            if first_at is None and copied > 0:
                first_at, first_count = now, copied
            if copied >= self.records:
                run = Run(name, self.records - first_count, now - (first_at or now))
                LOG.info("%s copied %d records in %.2f s: %.0f rec/s", name, run.records, run.seconds,
                         run.rate)
                return run
            time.sleep(0.5)
        raise TimeoutError(f"{name} did not copy {self.records} records within {DEADLINE_S:.0f} s")

    # --- the runs --------------------------------------------------------------------------------

    def driver_run(self, exactly_once: bool, latency_s: float) -> tuple[Run, list[float]]:
        source, target = ("eeos", "weos") if exactly_once else ("east", "west")
        path = srm_properties.write(
            self.workdir / f"srm-{source}.properties", {source: self.east, target: self.west},
            [(source, target)], "redis://127.0.0.1:1/0", {
                "topics": f"{self.topic}|{self.topic}lat-driver", "exactly.once": str(exactly_once).lower(),
                "emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false",
                "refresh.topics.interval.seconds": 5, "metrics.period": 5})
        name = f"driver-{'eos' if exactly_once else 'alo'}"
        process = ManagedProcess.python_module(name, "driver", ["--config", str(path)], self.workdir)
        started, sampling = time.time(), threading.Event()
        process.start()
        sampler = threading.Thread(target=self._sample, args=(process, sampling), daemon=True)
        sampler.start()
        try:
            run, samples = self.measure(name, source, "driver", exactly_once, latency_s)
        finally:
            sampling.set()
            sampler.join(5)
            process.stop()
        self.assign_s = max(self.assign_s, assigned_after(process.log_file, started, self.topic))
        return run, samples

    def mm2_run(self, exactly_once: bool, latency_s: float) -> tuple[Run, list[float]]:
        source, target = ("srce", "dste") if exactly_once else ("src", "dst")
        settings = {
            "clusters": f"{source}, {target}", f"{source}.bootstrap.servers": self.east,
            f"{target}.bootstrap.servers": self.west, f"{source}->{target}.enabled": "true",
            f"{target}->{source}.enabled": "false",
            f"{source}->{target}.topics": f"{self.topic}|{self.topic}lat-mm2", "tasks.max": "1",
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
        name = f"mm2-{'eos' if exactly_once else 'alo'}"
        command = [require("java"), "-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={LOG4J2}", "-cp",
                   f"{kafka_jars()}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(path)]
        process = ManagedProcess(name, command, self.workdir / f"{name}.log").start()
        try:
            run, samples = self.measure(name, source, "mm2", exactly_once, latency_s)
        finally:
            process.stop()
        return run, samples

    def measure(self, name: str, source: str, replicator: str, exactly_once: bool,
                latency_s: float) -> tuple[Run, list[float]]:
        """The copy's timing (with exactly-once, through the progress topic) and, at least once, the
        latency of a steady load on the `<topic>lat-<replicator>` topic."""
        remote = f"{source}.{self.topic}"
        tracker = ProgressTracker(self.west, f"mm2-offsets.{source}.internal") if exactly_once else None
        run = self.time_scale_copy(name, tracker.total if tracker else lambda: self.end_offsets(remote))
        if tracker is not None:
            tracker.close()
        latency_topic = f"{self.topic}lat-{replicator}"
        samples = [] if exactly_once else self.scale_latency(latency_topic, f"{source}.{latency_topic}",
                                                              latency_s)
        return run, samples

    def scale_latency(self, topic: str, remote: str, seconds: float) -> list[float]:
        consumer = Consumer({"bootstrap.servers": self.west, "group.id": f"bench-lat-{remote}",
                             "enable.auto.commit": False})
        wait_for_topic(self.west_admin, remote)
        ends = [consumer.get_watermark_offsets(TopicPartition(remote, p), timeout=10)[1]
                for p in range(PARTITIONS)]
        consumer.assign([TopicPartition(remote, p, end) for p, end in enumerate(ends)])
        samples: list[float] = []
        stop = threading.Event()
        load = self.perf_producer(topic, int(LATENCY_RATE * seconds), 100, LATENCY_RATE)
        threading.Thread(target=lambda: (load.wait(), time.sleep(3), stop.set()), daemon=True).start()
        warm_until = time.time() * 1000 + 2000
        while not stop.is_set():
            # What is fetched at once, else the first record only: a batch consume would stamp every
            # record with the time its batch filled (bench/replication.py's latency()).
            messages = consumer.consume(POLL_BATCH, timeout=0) or consumer.consume(1, timeout=POLL_TIMEOUT_S)
            for message in messages:
                if message.error() is None and message.timestamp()[1] > warm_until:
                    samples.append(time.time() * 1000 - message.timestamp()[1])
        consumer.close()
        return samples

    def _sample(self, process: ManagedProcess, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            pid = process.process.pid if process.process is not None else None
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except (OSError, TypeError):
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            self.peak_rss_mb = max(self.peak_rss_mb, int(fields["VmRSS"].split()[0]) / 1024)
            self.peak_threads = max(self.peak_threads, int(fields["Threads"]))


class ProgressTracker:
    """The committed progress of one replication (MM2's Connect offsets): records copied so far."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic, self.last = topic, {}
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
                if message.error() is not None or message.key() is None or message.value() is None:
                    continue
                try:
                    partition = json.loads(message.key())[1]["partition"]
                    self.last[partition] = json.loads(message.value())["offset"]
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


def measure_scale(bench: ScaleBench, latency_seconds: float) -> str:
    bench.preload_scale()
    driver, driver_lat = bench.driver_run(False, latency_seconds)
    mm2, mm2_lat = bench.mm2_run(False, latency_seconds)
    driver_eos, _ = bench.driver_run(True, latency_seconds)
    try:
        mm2_eos, _ = bench.mm2_run(True, latency_seconds)
        eos_ratio = f"{driver_eos.rate / mm2_eos.rate:.2f}"
    except TimeoutError as exc:
        LOG.error("MM2 with exactly-once did not finish: %s", exc)
        mm2_eos, eos_ratio = Run("mm2-eos", 0, 0.0), "nan"
    print(f"scale: {PARTITIONS} partitions, {SIZE} B records; driver {driver.rate:.0f} rec/s, mm2 "
          f"{mm2.rate:.0f} rec/s; exactly-once: driver {driver_eos.rate:.0f} rec/s, mm2 {mm2_eos.rate:.0f} "
          f"rec/s; p50 ms driver {percentile(driver_lat, 0.5):.1f} mm2 {percentile(mm2_lat, 0.5):.1f}")
    return (f"driver_vs_mm2_throughput={driver.rate / mm2.rate:.2f} driver_vs_mm2_throughput_eos={eos_ratio} "
            f"p99_ms_driver={percentile(driver_lat, 0.99):.1f} p99_ms_mm2={percentile(mm2_lat, 0.99):.1f} "
            f"driver_rss_mb={bench.peak_rss_mb:.0f} driver_threads={bench.peak_threads} "
            f"assign_s={bench.assign_s:.1f}")
