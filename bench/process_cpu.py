"""Where a bench's CPU goes, by process (and the Spark JVM by thread), read from /proc.

The aggregator bench runs every part on one 2-core machine: the Spark JVM (driver and executors in
local mode), the executors' Python workers, the Spark driver's Python process and its merge
child, Redis, the Kafka broker. What limits a figure is often not one stage but the machine's CPU:
CpuBudget samples each part's CPU seconds so a span (the steady batches) can be split by part.
The aggregator benches sample from a process of their own (bench/sampler.py), never from a thread of
the driver they measure: `driver` is the Spark driver's pid, not necessarily this process's.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, cast

import redis

LOG = logging.getLogger(__name__)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Spark JVM threads by what they do (/proc comm names, cut at 15 characters).
JVM_THREADS = (("executor tasks", "^Executor task"), ("JIT compilers", "^C[12] Compiler"),
               ("GC", "^(G1|GC) "), ("streaming query", "^stream exec"))


def fixed_work_cpu_ms() -> float:
    """CPU ms a fixed piece of Python work (tuples in a dict, a sort: what the sink does a partition) takes
    now. On a shared host the same code runs slower at times (other tenants on the caches and memory
    bus, the clock) with no steal shown; a batch's times follow it, and this tells such a span apart."""
    began = time.thread_time_ns()
    table = {(i, i % 7): (i * 2, str(i)) for i in range(2_000)}
    sorted(table.values())
    return (time.thread_time_ns() - began) / 1e6


def stat_fields(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except OSError:  # the process or thread ended
        return []
    return text[text.rindex(")") + 2:].split()


def stat_ticks(path: Path) -> tuple[int, int]:
    """(utime, stime) of a process or thread's stat file, in clock ticks; (0, 0) once it ended."""
    fields = stat_fields(path)
    return (int(fields[11]), int(fields[12])) if fields else (0, 0)


# Redis's AOF rewrites: forked children (`redis-aof-rewrite`), in Redis's figure once it has waited for them
# (with_children), shown apart like a JVM thread. The product's Redis (stack/redis_server.py, compose.yaml)
# runs the append-only file with Redis's default rewrite thresholds, so a deployment pays them too.
REDIS_REWRITES = "redis: AOF rewrites"

# The machine's own line, under a name budget_line neither shows nor counts in a total (": " names a
# part's thread and there is no "host" part): the bench prints it apart.
HOST_STEAL = "host: steal"


def steal_ticks() -> int:
    """CPU time the hypervisor gave other guests while this one's CPUs wanted it (/proc/stat), all CPUs: a
    run whose every part took longer for the same CPU seconds shows up here."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0
    return int(fields[8]) if len(fields) > 8 else 0


def ticks(path: Path, with_children: bool = False) -> int:
    """utime + stime, and with `with_children` those of the children it waited for: Redis's AOF rewrites
    run in a child that renames itself (`redis-aof-rewrite`), so is not told as Redis while it runs, and
    ends within a sample or two."""
    fields = stat_fields(path)
    return sum(int(f) for f in fields[11:15 if with_children else 13]) if fields else 0


def command(entry: Path) -> list[bytes]:
    try:
        return (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return [b""]


def children(pid: int) -> list[int]:
    """Child processes but the JVM (in local mode the JVM is a child too, and it runs the executors), Redis
    (the bench starts its redis-server from the driver's process) and the bench's sampler: an older
    aggregator's merge child, the bench's input producer while it runs."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(entry / "stat")
            if fields and int(fields[1]) == pid and not is_sampler(entry):
                program = command(entry)[0]
                if b"java" not in program and b"redis-server" not in program:
                    out.append(int(entry.name))
    return out


# The name the bench's sampling process gives itself (/proc/PID/comm, at most 15 characters): a part of no
# figure, and told apart from the bench's other Python children (the input producer) by it.
SAMPLER_COMM = "srm-bench-samp"
SAMPLER = "bench: sampler"  # its CPU, under a name budget_line neither shows nor counts in a total


def is_sampler(entry: Path) -> bool:
    try:
        return (entry / "comm").read_text().strip() == SAMPLER_COMM
    except OSError:
        return False


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether `pid` is `ancestor` or one of its descendants (now: a process that ended is neither)."""
    while pid > 1:
        if pid == ancestor:
            return True
        fields = stat_fields(Path(f"/proc/{pid}/stat"))
        if not fields:
            return False
        pid = int(fields[1])
    return False


def part_of(pid: int, driver: int) -> str | None:
    """Which part of the bench a process is, or None for what is not the bench's. Only the bench's own
    descendants count: on a shared machine other Spark JVMs, Python workers, brokers and Redis servers (a
    test suite's) run beside it, and counting them made the aggregator's tree 1.7 GB larger in one run."""
    if pid == driver:
        return "driver"
    if not descends_from(pid, driver):
        return None
    if is_sampler(Path(f"/proc/{pid}")):
        return SAMPLER
    argv = command(Path(f"/proc/{pid}"))
    cmd = b" ".join(argv)
    if b"java" in argv[0]:
        if b"SparkSubmit" in cmd:
            return "spark JVM"
        return "kafka broker" if b"kafka" in cmd.lower() else None
    if b"redis-server" in argv[0]:
        return "redis"
    if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
        return "python workers"
    # The driver's own Python children but the sampler: the bench's input producer (a pool worker started
    # by spawn); the aggregator has none.
    return "input producer" if b"--multiprocessing-fork" in argv else None


class Sampling:
    """Takes a sample every EVERY_S in a thread of its own, from start() to stop() (a sample that fails is
    logged and lost, not the figure). Pickled (the bench's sampler gets it from the driver and sends it
    back with its samples), it leaves its thread and what RUNTIME names behind."""

    EVERY_S = 0.5
    RUNTIME: tuple[str, ...] = ("_stop", "_thread")

    def start(self) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.take()
            except Exception as error:
                LOG.warning("%s: a sample failed: %s", type(self).__name__, error)
            self._stop.wait(self.EVERY_S)

    def take(self) -> None:
        raise NotImplementedError

    def __getstate__(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if name not in self.RUNTIME}


class CpuBudget(Sampling):
    """Samples every EVERY_S each part's CPU seconds (a process that ended keeps what it used) of the
    driver `driver` (by default this process) and its descendants; `between(a, b)` is what each part
    used from time a to time b."""

    def __init__(self, driver: int | None = None) -> None:
        self.driver = driver or os.getpid()
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._ticks: dict[tuple[str, int], int] = {}  # (part, pid or JVM thread id) -> ticks
        self._parts: dict[int, str | None] = {}
        self._thread_kinds: dict[int, str] = {}  # JVM thread id -> what it does (named once, at start)

    def take(self) -> None:
        self.sample()

    def sample(self) -> None:
        driver = self.driver
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid not in self._parts:
                self._parts[pid] = part_of(pid, driver)
            part = self._parts[pid]
            if part is None:
                continue
            used = ticks(entry / "stat", with_children=part == "redis")
            self._ticks[(part, pid)] = max(self._ticks.get((part, pid), 0), used)
            if part == "redis":  # of it, what its AOF rewrites took (children it waited for)
                key = (REDIS_REWRITES, -pid)
                self._ticks[key] = max(self._ticks.get(key, 0), used - ticks(entry / "stat"))
            if part == "spark JVM":
                self._jvm_threads(entry)
        self._ticks[(HOST_STEAL, 0)] = steal_ticks()
        totals: dict[str, float] = {}
        for (part, _), used in self._ticks.items():
            totals[part] = totals.get(part, 0.0) + used / CLOCK_TICKS
        self.samples.append((time.time(), totals))

    def _jvm_threads(self, process: Path) -> None:
        try:
            threads = list((process / "task").iterdir())
        except OSError:
            return
        for thread in threads:
            tid = int(thread.name)
            kind = self._thread_kinds.get(tid)
            if kind is None:
                try:
                    name = (thread / "comm").read_text().strip()
                except OSError:
                    continue
                kind = self._thread_kinds[tid] = next(
                    (kind for kind, pattern in JVM_THREADS if re.match(pattern, name)), "other threads")
            key = (f"spark JVM: {kind}", -tid)
            self._ticks[key] = max(self._ticks.get(key, 0), ticks(thread / "stat"))

    def at(self, when: float) -> dict[str, float]:
        """Each part's CPU s at the last sample taken at or before `when`."""
        i = bisect.bisect_right([t for t, _ in self.samples], when) - 1
        return self.samples[max(0, i)][1]

    def between(self, began: float, ended: float) -> dict[str, float]:
        if not self.samples:
            return {}
        before, after = self.at(began), self.at(ended)
        return {part: used - before.get(part, 0.0) for part, used in after.items()}


# The parts that make up an aggregator (the input producer, Redis and the broker are the bench's).
AGGREGATOR_PARTS = ("driver", "spark JVM", "python workers")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def resident_mb(pid: int) -> float:
    """A process's resident memory now (0 once it ended)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES / 2**20
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class RunPeak:
    """The tree's peak over one of a bench's runs, by part, and what the probes read then."""

    mb: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)  # each part's share of the tree's peak
    workers: list[float] = field(default_factory=list)  # each Python worker's share, largest first
    probes: dict[str, float] = field(default_factory=dict)  # the probes' last readings at the peak
    own: dict[str, float] = field(default_factory=dict)  # each part's (and probe's) own peak in the run

    def line(self) -> str:
        shares = ", ".join(f"{part} {mb:.0f}" for part, mb in sorted(self.parts.items(), key=lambda i: -i[1]))
        if len(self.workers) > 1:
            shares += " (workers " + ", ".join(f"{mb:.0f}" for mb in self.workers) + ")"
        text = f"peak RSS {self.mb:.0f} MB ({shares})"
        if self.probes:
            text += "; then " + ", ".join(f"{name} {mb:.0f}" for name, mb in self.probes.items())
        if self.own:
            text += "; own peaks " + ", ".join(f"{name} {mb:.0f}" for name, mb in self.own.items())
        return text


class TreeMemory(Sampling):
    """The aggregator's whole process tree (AGGREGATOR_PARTS: the driver `driver`, the JVM that runs the
    executors in local mode, the executors' Python workers, the sink's children) summed at each sample;
    `peak_mb` is the greatest sum seen. A sum of each process's own peak (VmHWM) would add peaks that never
    met.

    A bench names its runs (`run`): each gets its own peak by part (RunPeak), so a figure over several runs
    says which run and which part set it. `probes` read what RSS does not split (the driver's Arrow pool,
    the JVM's heap) every PROBE_EVERY samples; `timeline`, a file, gets every sample as a line."""

    EVERY_S = 0.25
    PROBE_EVERY = 4  # samples: a probe may call into the JVM (py4j), once a second is enough
    RUNTIME = (*Sampling.RUNTIME, "_probes", "_timeline")

    def __init__(self, driver: int, probes: dict[str, Callable[[], float]] | None = None,
                 timeline: Path | None = None) -> None:
        self.driver = driver
        self.peak_mb = 0.0
        self.peak_parts: dict[str, float] = {}  # each part's share of the peak
        self.runs: dict[str, RunPeak] = {}
        self._run_name = "start"
        self._probes = probes or {}
        self._readings: dict[str, float] = {}
        self._timeline = timeline.open("w", buffering=1) if timeline else None  # kept if the run is cut
        self._samples = 0
        self._parts: dict[int, str | None] = {}

    def stop(self) -> None:
        super().stop()
        if self._timeline:
            self._timeline.close()

    def run(self, name: str) -> None:
        """What follows is the bench's run `name` (its own peak)."""
        self._run_name = name

    def take(self) -> None:
        workers: dict[int, float] = {}
        parts = self.sample(workers)
        if self._samples % self.PROBE_EVERY == 0:
            for name, probe in self._probes.items():
                try:
                    self._readings[name] = probe()
                except Exception as error:  # the JVM stopping: the last reading stays
                    LOG.debug("memory probe %s failed: %s", name, error)
        self._samples += 1
        total = sum(parts.values())
        if total > self.peak_mb:
            self.peak_mb, self.peak_parts = total, parts
        run = self.runs.setdefault(self._run_name, RunPeak())
        if total > run.mb:
            run.mb, run.parts, run.probes = total, parts, dict(self._readings)
            run.workers = sorted(workers.values(), reverse=True)
        for name, mb in [*parts.items(), *self._readings.items()]:
            run.own[name] = max(run.own.get(name, 0.0), mb)
        if self._timeline:
            values = " ".join(f"{name}={mb:.0f}" for name, mb in [*parts.items(), *self._readings.items()])
            workers_text = ",".join(f"{mb:.0f}" for mb in sorted(workers.values(), reverse=True))
            self._timeline.write(f"{time.time():.2f} {self._run_name} total={total:.0f} {values} "
                                 f"workers={workers_text}\n")

    def sample(self, workers: dict[int, float] | None = None) -> dict[str, float]:
        """Each part's resident MB now (and each Python worker's, into `workers`)."""
        driver = self.driver
        parts: dict[str, float] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                pid = int(entry.name)
                if pid not in self._parts:
                    self._parts[pid] = part_of(pid, driver)
                part = self._parts[pid]
                if part in AGGREGATOR_PARTS:
                    mb = resident_mb(pid)
                    parts[part] = parts.get(part, 0.0) + mb
                    if part == "python workers" and workers is not None:
                        workers[pid] = mb
        return parts


def budget_line(used: dict[str, float], per: float, unit: str) -> str:
    """`used` (CPU s by part) divided by `per`, largest first; the JVM's threads follow the JVM."""
    parts = sorted((p for p in used if ": " not in p), key=lambda p: -used[p])
    shown = []
    for part in parts:
        shown.append(f"{part} {used[part] / per:.2f}")
        threads = sorted((p for p in used if p.startswith(f"{part}: ")), key=lambda p: -used[p])
        if threads:
            shown[-1] += " (" + ", ".join(f"{p.split(': ')[1]} {used[p] / per:.2f}" for p in threads) + ")"
    total = sum(used[p] for p in parts)
    return f"total {total / per:.2f} {unit}: " + ", ".join(shown)


def redis_cpu_s(client: redis.Redis) -> float:
    """The CPU seconds (user and system) a redis-server has used since it started, from INFO."""
    cpu = cast(dict, client.info("cpu"))
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def redis_net_bytes(client: redis.Redis) -> tuple[int, int]:
    """Bytes into and out of Redis since it started (INFO stats)."""
    stats = cast(dict, client.info("stats"))
    return int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


class StageClock:
    """Thread CPU by stage: a call charges the time since the last call (or the start) to its stage."""

    def __init__(self, stages: dict[str, float]) -> None:
        self.stages = stages
        self.restart()

    def restart(self) -> None:
        """Charge nothing for the time until now."""
        self._at = time.thread_time()

    def __call__(self, name: str) -> None:
        now = time.thread_time()
        self.stages[name] = self.stages.get(name, 0.0) + now - self._at
        self._at = now


class PeakRss:
    """The process's RSS, sampled every 5 ms while a stage runs: its rise over the stage's start."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def __enter__(self) -> PeakRss:
        self._start, self.peak = self._rss(), 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss() - self._start)

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss() - self._start)
