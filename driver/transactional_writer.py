"""Exactly-once copying (`exactly.once = true`): one transactional producer per task.

A task (`driver.replication_tasks`) is a fixed set of source partitions; its producer's
`transactional.id` is derived from the replication and the task number, so the ids are as many as the
tasks (``tasks.max``), whatever the partition count, and the producers, their librdkafka threads and
broker connections are bounded by the tasks this worker owns. Taking a task over calls
`init_transactions` with its id, which fences the previous owner (a zombie after a rebalance, or this
worker's previous incarnation after kill -9) and aborts its open transaction before the new owner reads
the progress topic. The records of all the task's partitions and their progress are committed in one
transaction, so a `read_committed` reader of the remote topic sees each source record exactly once.

The copy loop calls `fence` when it starts a task, never a group callback: `init_transactions` may wait
for the previous owner's transaction to be aborted. The tasks a worker takes at once are fenced side by
side (each call waits on its own transaction coordinator; one after another, four tasks took four
times as long), and a call that times out is resumed, as librdkafka allows, until `INIT_DEADLINE_S`:
a coordinator still loading its state after a broker start is not a reason to restart the worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from confluent_kafka import KafkaException, Producer

from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.send_queue import PartitionKey, QueueLimits
from driver.target_writer import (
    FLUSH_TIMEOUT_S,
    SHUTDOWN_FLUSH_S,
    TRANSACTION_INTERVAL_S,
    TRANSACTION_TIMEOUT_S,
    CopiedRun,
    DeliveryFailed,
    PartitionFlow,
    _WriterBase,
)

LOG = logging.getLogger(__name__)

INIT_DEADLINE_S: Final = 2 * TRANSACTION_TIMEOUT_S
MAX_PARALLEL_INITS: Final = 8


def transactional_id(prefix: str, task: int) -> str:
    """The `transactional.id` of one task of a replication (prefix: the replication's group id)."""
    return f"{prefix}|task-{task}"


class TransactionalWriter(_WriterBase):
    def __init__(self, producer_factory: Callable[[str], Producer], source: str,
                 progress_topic: str, transactional_prefix: str,
                 emitter: OffsetSyncEmitter | None, limits: QueueLimits | None = None) -> None:
        super().__init__(source, progress_topic, emitter, limits)
        self.producer_factory, self.prefix = producer_factory, transactional_prefix
        self.producers: dict[int, Producer] = {}
        self._by_task: dict[int, dict[PartitionKey, PartitionFlow]] = {}  # what each task commits
        self._open: set[int] = set()  # tasks with a transaction under way
        self._next_commit = time.monotonic() + TRANSACTION_INTERVAL_S

    def transactional_id(self, task: int) -> str:
        return transactional_id(self.prefix, task)

    def fence(self, tasks: Iterable[int]) -> None:
        """Own these tasks' transactional ids: earlier owners are fenced, their open work aborted.
        Returns once every one is fenced; raises the first failure."""
        new = sorted(set(tasks) - set(self.producers))
        if not new:
            return
        producers = {task: self.producer_factory(self.transactional_id(task)) for task in new}
        if len(new) == 1:
            self._init(new[0], producers[new[0]])
        else:  # init_transactions releases the GIL while it waits for the coordinator
            with ThreadPoolExecutor(min(len(new), MAX_PARALLEL_INITS), "init-transactions") as pool:
                futures = [pool.submit(self._init, task, producer) for task, producer in producers.items()]
            failures = [failure for future in futures if (failure := future.exception()) is not None]
            if failures:
                raise failures[0]

    def _init(self, task: int, producer: Producer) -> None:
        deadline = time.monotonic() + INIT_DEADLINE_S
        while True:
            try:
                producer.init_transactions(min(TRANSACTION_TIMEOUT_S, max(1.0, deadline - time.monotonic())))
                break
            except KafkaException as exc:  # a timed-out call is resumable: the same call goes on
                error = exc.args[0]
                if not error.retriable() or time.monotonic() >= deadline:
                    raise
                LOG.info("init_transactions of %s not done yet (%s); resuming", self.transactional_id(task),
                         error.str())
        self.producers[task] = producer
        self._by_task.setdefault(task, {})

    def add(self, flows: Iterable[PartitionFlow]) -> None:
        for flow in flows:
            self.fence([flow.task])
            self.flows[flow.key] = flow
            self._by_task[flow.task][flow.key] = flow

    def _acknowledged(self, copied: CopiedRun) -> None:
        """A run's records are in the open transaction: counted now, their syncs fed once committed."""
        copied.acknowledged(self._now_ms)
        copied.flow.pending_syncs.append(copied)

    def _producer_of(self, flow: PartitionFlow) -> Producer:
        producer = self.producers[flow.task]
        if flow.task not in self._open:
            producer.begin_transaction()
            self._open.add(flow.task)
        return producer

    def tick(self, now: float) -> None:
        self._now_ms = time.time() * 1000
        for producer in self.producers.values():
            producer.poll(0)
        self.queue.note_acknowledgements(now)
        self._check()
        self._send_backlog()
        if now >= self._next_commit:
            self._commit(sorted(self._open))
            if self.emitter is not None:
                self.emitter.flush_delayed()
            self._next_commit = now + TRANSACTION_INTERVAL_S
        elif self.emitter is not None:
            self.emitter.send_due()

    def release(self, keys: Iterable[PartitionKey], lost: bool = False,
                timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Stop writing partitions: their task's open transaction is committed (aborted when lost)."""
        flows = [self.flows[k] for k in keys if k in self.flows]
        if not flows:
            return
        tasks = sorted({flow.task for flow in flows} & self._open)
        deadline = time.monotonic() + timeout_s
        failed: Exception | None = None
        if lost:
            for task in tasks:
                self._abort(task)
        else:
            try:
                self._commit(tasks, timeout_s)
            except (KafkaException, DeliveryFailed) as exc:  # not committed in time: aborted instead
                LOG.warning("releasing %d partition(s): commit failed (%s); aborting", len(flows), exc)
                failed = exc
                for task in tasks:
                    if task in self._open:
                        self._abort(task, max(0.1, deadline - time.monotonic()))
        for flow in flows:
            del self.flows[flow.key]
            self._by_task.get(flow.task, {}).pop(flow.key, None)
        self.queue.drop(flow.key for flow in flows)
        if failed is not None and any(self._by_task.get(task) for task in tasks):
            # The aborted transaction held records of partitions this worker keeps: start afresh from
            # the progress topic rather than go on past records that were never committed.
            raise DeliveryFailed(f"commit failed while releasing partitions: {failed}")

    def retire(self, tasks: Iterable[int]) -> None:
        """Closes the producers of tasks this worker no longer owns (their partitions released)."""
        for task in tasks:
            producer = self.producers.pop(task, None)
            if producer is not None:
                if task in self._open:  # nothing of it may stay open: its next owner aborts it anyway
                    self._abort(task, 1.0)
                producer.flush(1.0)
            self._by_task.pop(task, None)

    def _commit(self, tasks: list[int], timeout_s: float = TRANSACTION_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        for task in tasks:
            producer, flows = self.producers[task], list(self._by_task[task].values())
            for flow in flows:
                if flow.produced > flow.persisted:
                    progress_key, value = self._progress_record(flow, flow.produced)
                    producer.produce(self.progress_topic, value, progress_key,
                                     on_delivery=self._delivered_other)
            self._now_ms = time.time() * 1000
            if producer.flush(max(0.1, deadline - time.monotonic())) > 0:
                raise DeliveryFailed(f"records of task {task} not acknowledged in time")
            self.queue.note_acknowledgements(time.monotonic())
            self._check()
            producer.commit_transaction(max(0.1, deadline - time.monotonic()))
            self._open.discard(task)
            for flow in flows:
                flow.acked = flow.persisted = flow.produced
                for copied in flow.pending_syncs:
                    self._feed_syncs(copied)
                flow.pending_syncs.clear()

    def _abort(self, task: int, timeout_s: float = TRANSACTION_TIMEOUT_S) -> None:
        try:
            self.producers[task].abort_transaction(timeout_s)
        except KafkaException as exc:  # fenced already: the new owner aborted it for us
            LOG.info("abort of %s not needed: %s", self.transactional_id(task), exc)
        self._open.discard(task)
        for flow in self._by_task.get(task, {}).values():
            flow.in_flight.clear()
            flow.pending_syncs.clear()

    def close(self, timeout_s: float = SHUTDOWN_FLUSH_S) -> None:
        self.release(list(self.flows), timeout_s=timeout_s)
        self.retire(list(self.producers))
