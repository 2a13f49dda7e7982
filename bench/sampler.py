"""The aggregator benches' sampling, in a process of its own: none of it runs in the driver it measures.

The bench's process is the Spark driver. At 100,000 series that process is GIL-bound (the merge thread
and the foreachBatch sink take turns on one core), and the bench's own threads in it (a Redis poll every
5 ms with a CPU read every 50 ms, the CPU split by part, the tree's memory) took ~20 % of its samples in a
py-spy profile (2026-11-29): their CPU was left out of the driver's figure, but the GIL they held was
taken from the threads being measured.

`Sampler` starts one child (spawn) that samples the driver from outside, through /proc and Redis:
- the aggregator's tree memory (process_cpu.TreeMemory), from the start to `close`, the JVM's heap read
  through a py4j connection of the sampler's own to the Spark JVM, the driver's Arrow pool through a
  shared value that one thread in the driver sets once a second (a call of a few µs);
- what a run asks for (`watching`): any process_cpu.Sampling made in the driver (the CPU by part, when
  batches are merged, when a probe's value is readable) is sent to the child, run there, and sent back
  with its samples when the run ends.
Every figure is what it was: the same samples at the same rates of the same processes. The sampler is
part of no figure; it names itself (process_cpu.SAMPLER_COMM) so that process_cpu tells it apart, and its
CPU is printed apart (process_cpu.SAMPLER).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
from py4j.clientserver import ClientServer, JavaParameters, PythonParameters
from py4j.java_gateway import JavaObject
from pyspark.sql import SparkSession

from bench.process_cpu import SAMPLER_COMM, Sampling, TreeMemory


def jvm_memory_probes(jvm: Any) -> dict[str, Callable[[], float]]:
    """What RSS does not split in the Spark JVM, in MB: its heap (committed, used) and what it commits
    beside it (metaspace, code cache). `jvm` is a py4j gateway's view of it (`spark.sparkContext._jvm`)."""
    bean = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()

    def heap() -> JavaObject:
        return bean.getHeapMemoryUsage()

    return {"JVM heap committed": lambda: heap().getCommitted() / 2**20,
            "JVM heap used": lambda: heap().getUsed() / 2**20,
            "JVM non-heap committed": lambda: bean.getNonHeapMemoryUsage().getCommitted() / 2**20}


def serve(requests: Connection, driver: int, gateway: tuple[int, str], arrow_mb: Any,
          timeline: Path | None) -> None:
    """The sampler's side: samples the tree's memory from the start, runs each Sampling it is sent until
    it is asked for it back, answers each request (an error too) in turn."""
    Path("/proc/self/comm").write_text(SAMPLER_COMM)
    port, token = gateway
    spark_jvm = ClientServer(JavaParameters(port=port, auth_token=token, auto_convert=True),
                             PythonParameters(port=0, eager_load=False))
    probes = {"driver arrow": lambda: float(arrow_mb.value), **jvm_memory_probes(spark_jvm.jvm)}
    memory = TreeMemory(driver, probes, timeline).start()
    running: dict[str, Sampling] = {}
    requests.send("ready")
    while True:
        try:
            request, *args = requests.recv()
        except EOFError:  # the driver is gone
            return
        answer: Any = None
        try:
            match request:
                case "start":
                    running[args[0]] = args[1].start()
                case "stop":
                    answer = running.pop(args[0])
                    answer.stop()
                case "run":
                    memory.run(args[0])
                case "sample":
                    answer = memory.sample()
                case "close":
                    memory.stop()
                    answer = memory
        except Exception as error:
            answer = error
        requests.send(answer)
        if request == "close":
            spark_jvm.close()
            return


class Sampler:
    """The driver's side of the bench's sampling process (see the module's docstring); a context manager
    that ends the process (and its one thread in the driver) whatever happens."""

    ARROW_EVERY_S = 1.0

    def __init__(self, spark: SparkSession, timeline: Path | None = None) -> None:
        context = multiprocessing.get_context("spawn")
        self._arrow_mb = context.Value("d", 0.0, lock=False)
        self._requests, theirs = context.Pipe()
        params = spark.sparkContext._gateway.java_parameters  # type: ignore[union-attr]
        gateway = (params.port, params.auth_token)
        self._process = context.Process(target=serve, daemon=True,
                                        args=(theirs, os.getpid(), gateway, self._arrow_mb, timeline))
        self._process.start()
        theirs.close()
        self.pid = cast(int, self._process.pid)
        self._memory: TreeMemory | None = None
        self._done = threading.Event()
        self._gauge = threading.Thread(target=self._gauge_arrow, daemon=True, name="bench-arrow-gauge")
        self._gauge.start()
        try:
            self._requests.recv()  # "ready": the tree's memory is sampled from here on
        except EOFError:
            raise RuntimeError("the bench's sampler ended before it started (its error is above)") from None

    def _gauge_arrow(self) -> None:
        """The driver's Arrow pool (bytes allocated) for the sampler's memory probe: only this process can
        read it."""
        while True:
            self._arrow_mb.value = pa.default_memory_pool().bytes_allocated() / 2**20
            if self._done.wait(self.ARROW_EVERY_S):
                return

    def _ask(self, *request: Any) -> Any:
        self._requests.send(request)
        answer = self._requests.recv()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def run(self, name: str) -> None:
        """What follows is the bench's run `name` (its own memory peak: TreeMemory.run)."""
        self._ask("run", name)

    def sample(self) -> dict[str, float]:
        """The aggregator's tree now, MB by part (TreeMemory.sample)."""
        return cast(dict[str, float], self._ask("sample"))

    @contextmanager
    def watching(self, **samplings: Sampling) -> Iterator[dict[str, Sampling]]:
        """Runs each Sampling in the sampler while the block runs; the dict it gives holds them, with their
        samples, once the block is done."""
        done: dict[str, Sampling] = {}
        started = []
        try:
            for name, sampling in samplings.items():
                self._ask("start", name, sampling)
                started.append(name)
            yield done
        finally:
            for name in started:
                done[name] = self._ask("stop", name)

    def close(self) -> TreeMemory:
        """Stops sampling; the tree's memory as sampled from the start."""
        if self._memory is None:
            self._memory = cast(TreeMemory, self._ask("close"))
            self._process.join(30)
        return self._memory

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *_: Any) -> None:
        self._done.set()
        self._gauge.join()
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
