"""One replication `source -> target`: copies the eligible topics and reports raw metrics.

Records are copied as bytes (key, value, headers, timestamp, same partition) to the remote topic the
ReplicationPolicy names. Where each source partition stands lives in `mm2-offsets.<source>.internal`
on the target, in MM2's Connect offset format (`driver.progress_record`), so a restart, a takeover by
another driver process or MM2 itself resumes from the last replicated record.

Worker coordination: as MM2, the work is split into ``tasks.max`` tasks, each a fixed set of source
partitions (`driver.replication_tasks`). MM2 dedicated mode hands tasks to its workers in a Connect
group on the target; we let Kafka's group protocol do it: every driver process serving a replication
joins the consumer group `srm-driver.<source>-<target>` on the SOURCE cluster, subscribed to the
replication's coordination topic, one partition per task, with cooperative-sticky assignment. The tasks
are shared among the live processes and a dead one's tasks move whole to the others, who resume from
the progress topic. The group only coordinates: progress is never committed to it; the source
partitions of the owned tasks are assigned by hand to a consumer of their own.

Outages (`driver.copy_flow`): while the target takes nothing in, copied records wait in a bounded
queue and then in the backlog of their paused source partitions (`driver.send_queue`); while the
source does not answer, nothing arrives (`driver.source_watch`). Either way the loop keeps running, so
the worker stays in its group, reports FAILED with the reason while the outage lasts, and copies on as
soon as it ends. So does a target refusing to create a remote topic (`driver.topic_sync`): that topic
is left out, the others are copied.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence
from typing import Final

from confluent_kafka import OFFSET_INVALID, KafkaException, Message, Producer, TopicPartition

from clients import kafka_clients
from clients.kafka_clients import ClusterRejected, ClusterUnavailable, TopicSpec
from clients.retry_backoff import RetryBackoff
from contract.config import Replication, SrmConfig
from contract.records import raw_metrics
from contract.replication_policy import metrics_topic, progress_topic, tasks_topic
from contract.status import DriverStatus
from driver import replication_clients as clients
from driver.acl_sync import TopicAclSync
from driver.control_lists import AllowDenyLists
from driver.copy_flow import BackgroundRefresh, CopyFlow
from driver.copy_producers import CopyProducers, spread_settings
from driver.count_recovery import LastReports, tail_size, uncounted
from driver.offset_sync_emitter import OffsetSyncEmitter
from driver.progress_reader import ProgressReader
from driver.progress_record import PROGRESS_TOPIC_CONFIGS, PROGRESS_TOPIC_PARTITIONS, resume_offset
from driver.reader_health import ReplicationReaders
from driver.replication_clients import group_id
from driver.replication_stats import ReplicationStats
from driver.replication_tasks import TASKS_TOPIC_CONFIGS, TaskCoordinator, task_of, task_partitions
from driver.send_queue import QueueLimits
from driver.source_watch import SourceWatch
from driver.target_writer import (
    AT_LEAST_ONCE_PRODUCER,
    SHUTDOWN_FLUSH_S,
    TRANSACTION_TIMEOUT_S,
    AtLeastOnceWriter,
    PartitionFlow,
)
from driver.topic_sync import TopicRefusals, TopicSync, refresh_interval_s
from driver.transactional_writer import TransactionalWriter
from driver.worker_census import WorkerCensus

LOG = logging.getLogger(__name__)

POLL_BATCH: Final = 2000
POLL_TIMEOUT_S: Final = 0.1
RESTART_BACKOFF_S: Final = 10.0
PROGRESS_READ_TIMEOUT_S: Final = 2 * TRANSACTION_TIMEOUT_S
LAST_REPORTS_READ_TIMEOUT_S: Final = 30.0
# A final report is flushed before its partitions go: the next owner must find it (driver.count_recovery).
FINAL_REPORT_FLUSH_S: Final = 5.0
OUTAGE_CHECK_S: Final = 1.0
# A topic refresh that failed (a cluster not answering) is tried again this soon.
REFRESH_RETRY_S: Final = 10.0


class ReplicationWorker(threading.Thread):
    def __init__(self, config: SrmConfig, replication: Replication, stopping: threading.Event,
                 control: AllowDenyLists | None = None, readers: ReplicationReaders | None = None) -> None:
        super().__init__(name=f"replication-{replication.source}->{replication.target}", daemon=True)
        self.config, self.replication, self.stopping, self.control = config, replication, stopping, control
        source, target = replication.source, replication.target
        self.policy = config.replication_policy(source, target)
        self.refresh_s = refresh_interval_s(config, source, target)
        self.metrics_period_s = config.setting("metrics.period", source, target)
        self.exactly_once = config.setting("exactly.once", source, target)
        self.tasks_max = config.setting("tasks.max", source, target)
        if self.tasks_max < 1:
            raise config.config_error("tasks.max", f"must be at least 1, got {self.tasks_max}",
                                      source, target)
        self.emit_offset_syncs = config.setting("emit.offset-syncs.enabled", source, target)
        self.producers_spread = spread_settings(config, source, target)
        self.readers = readers or ReplicationReaders(replication.name)
        self.stats = ReplicationStats(source, target, self.readers.report)
        self.progress_guard = self.readers.progress_guard(self)
        self.limits = QueueLimits.from_config(config, source, target)
        self.source_watch = SourceWatch(source)
        self.flow = CopyFlow(replication.name, target, self.source_watch)
        self._refreshing = BackgroundRefresh(f"replication {replication.name}")
        self.census = WorkerCensus(replication.name, group_id(source, target),
                                   kafka_clients.GroupAdmin(config, source))
        self.backoff = RetryBackoff(f"replication {replication.name}", LOG, first_s=RESTART_BACKOFF_S)
        self.emitter: OffsetSyncEmitter | None = None
        remote_name = functools.partial(self.policy.format_remote_topic, source)
        self.acl_sync = (TopicAclSync(source, target, remote_name)
                         if config.setting("sync.topic.acls.enabled", source, target) else None)
        self.acl_interval_s = config.setting("sync.topic.acls.interval.seconds", source, target)
        self._topics: dict[str, int] = {}
        self.refreshes = 0  # completed topic refreshes, for observers waiting on one
        self._control_version: int | None = None
        self.refusals = TopicRefusals(replication.name)
        self.last_reports = LastReports(source, target, metrics_topic(source))

    @property
    def topics(self) -> dict[str, int]:
        """Source topic -> partition count of what this replication copies now."""
        return dict(self._topics)

    def run(self) -> None:
        """Replicates until stopped. A failure is reported as FAILED with its reason, every client is
        closed (only that ends librdkafka's reconnects to a cluster refusing us), and the replication
        starts again after a back-off that doubles up to 5 minutes: one log line per attempt."""
        source, target = self.replication.source, self.replication.target
        while not self.stopping.is_set():
            rejected_by: str | None = None
            try:
                self._run(source, target)
                return
            except ClusterRejected as exc:  # credentials, TLS trust or ACLs: the message names which
                reason, rejected_by = exc.fault.message, exc.fault.alias
            except ClusterUnavailable as exc:
                reason = str(exc)
            except Exception as exc:  # reported as FAILED, then retried: a broker outage must not end it
                if self.backoff.failures == 0:
                    LOG.exception("replication %s failed", self.replication.name)
                reason = f"{type(exc).__name__}: {exc}"
            self.stats.status, self.stats.error = DriverStatus.FAILED, reason[:300]
            if rejected_by != target:  # the target refusing us cannot take the report either
                self._publish_failure()
            self._discard_clients()
            self.backoff.wait(reason, self.stopping)

    def _discard_clients(self) -> None:
        """Drops every client of the last attempt; librdkafka destroys a handle with its last reference."""
        for name in ("source_admin", "target_admin", "producer", "consumer", "tasks", "progress", "writer",
                     "topic_sync", "emitter"):
            if hasattr(self, name):
                setattr(self, name, None)

    def _run(self, source: str, target: str) -> None:
        self.source_admin = kafka_clients.admin(self.config, source)
        self.target_admin = kafka_clients.admin(self.config, target)
        # At least once, records go out on this producer too (driver.target_writer: why these settings).
        copying = {} if self.exactly_once else AT_LEAST_ONCE_PRODUCER
        self.producer = kafka_clients.producer(self.config, target, source=source, target=target,
                                               overrides={**copying, **self.limits.producer_limits()})
        self.topic_sync = TopicSync(self.config, source, target, self.source_admin, self.target_admin,
                                    self.policy)
        kafka_clients.ensure_topics(self.target_admin, target, [
            TopicSpec(metrics_topic(source), 1, raw_metrics.TOPIC_CONFIGS),
            TopicSpec(progress_topic(source), PROGRESS_TOPIC_PARTITIONS, PROGRESS_TOPIC_CONFIGS)])
        self.progress = ProgressReader(clients.progress_consumer(self.config, self.replication),
                                       self.target_admin, progress_topic(source), source,
                                       guard=self.progress_guard)
        emitter = (OffsetSyncEmitter.for_replication(self.config, source, target)
                   if self.emit_offset_syncs else None)
        self.emitter = emitter
        self.writer = self._writer(emitter)
        kafka_clients.ensure_topics(self.source_admin, source, [
            TopicSpec(tasks_topic(target, self.tasks_max), self.tasks_max, TASKS_TOPIC_CONFIGS)])
        self.consumer = clients.copy_consumer(self.config, self.replication, self.limits, self.source_watch)
        self.tasks = TaskCoordinator(clients.coordination_consumer(self.config, self.replication),
                                     tasks_topic(target, self.tasks_max), self.tasks_max,
                                     self._tasks_left)
        try:
            self._loop()
        finally:
            self._shutdown(emitter)

    def _loop(self) -> None:
        next_refresh, next_report, next_acls = 0.0, time.monotonic() + self.metrics_period_s, 0.0
        next_outage_check, self._refreshing = 0.0, BackgroundRefresh(self._refreshing.name)
        # The group is counted half a period before each report: the report tells who holds tasks now.
        next_census = next_report - self.metrics_period_s / 2
        while not self.stopping.is_set():
            kafka_clients.check(self.consumer)  # a login refused after the start (credentials rotated)
            for producer in self._copy_producers():
                kafka_clients.check(producer)
            kafka_clients.check(self.tasks.consumer)
            arrived = self.tasks.poll()  # the group's callbacks run here; new tasks start outside them
            if arrived:
                self._start_tasks(arrived)
            now, silent = time.monotonic(), self.flow.clusters_silent(self.writer.queue)
            due = now >= next_refresh or self._control_changed()
            if due and not silent and not self._refreshing.running:
                next_refresh = now + self.refresh_s
                self._start_refresh()
            if not self._refreshing.apply_finished(self._apply_topics):
                next_refresh = now + REFRESH_RETRY_S
            if self.refusals.reason is not None:  # granting the ACL is all it takes: look again soon
                next_refresh = min(next_refresh, now + REFRESH_RETRY_S)
            next_report = now if self.refusals.take_change() else next_report  # a new status goes out now
            if self.acl_sync is not None and now >= next_acls and not silent and self._start_acl_pass():
                next_acls = now + self.acl_interval_s
            if self._topics:
                self.writer.write(self._poll())
            else:  # nothing to replicate yet: wait for the next refresh without spinning
                self.stopping.wait(min(1.0, max(0.0, next_refresh - now)))
            self.writer.tick(time.monotonic())
            self.flow.pause_backlogged(self.consumer, self.writer.paused())
            if now >= next_outage_check:
                next_outage_check = now + OUTAGE_CHECK_S
                if self.flow.check_outage(self.consumer, self.writer.queue, now):
                    next_report = now  # the status changes now, not at the next period
            if now >= next_census:
                if not self.source_watch.suspect:  # the request would wait out its whole timeout
                    self.census.request()
                next_census = next_report + self.metrics_period_s / 2
            if now >= next_report:
                self._publish_metrics()
                next_report = now + self.metrics_period_s
                next_census = next_report - self.metrics_period_s / 2

    def _copy_producers(self) -> list[Producer]:
        """The replication's producer and, at least once, the others the copy spreads over."""
        writer = self.writer
        return writer.copying.producers if isinstance(writer, AtLeastOnceWriter) else [self.producer]

    def _start_refresh(self) -> None:
        """The first refresh runs here (start-up fails with it), later ones beside the loop."""
        if self.refreshes:
            self._refreshing.start(self._eligible_topics)
        else:
            self._apply_topics(self._eligible_topics())

    def _poll(self) -> list[Message]:
        # librdkafka's batch consume waits for a full batch or the timeout: take what is already
        # fetched at once, and when nothing is, wait for the first record only (latency).
        messages = self.consumer.consume(POLL_BATCH, timeout=0)
        messages = messages or self.consumer.consume(1, timeout=POLL_TIMEOUT_S)
        if messages:
            self.source_watch.records_arrived()
        return messages

    def _shutdown(self, emitter: OffsetSyncEmitter | None) -> None:
        """Bounded: the process stops within its deadline (driver.__main__) even with the target down."""
        try:
            keys = list(self.writer.flows)
            self.writer.release(keys, timeout_s=SHUTDOWN_FLUSH_S)
            self._produce_metrics(self.stats.retire(set(keys)))
            self.producer.flush(min(FINAL_REPORT_FLUSH_S, SHUTDOWN_FLUSH_S))  # before the group learns we go
            self.writer.retire(list(self.tasks.owned))
        finally:
            self.tasks.close()
            self.consumer.close()
            self.progress.close()
            if emitter is not None:
                emitter.close(1.0)
            self.producer.flush(1.0)

    def _writer(self, emitter: OffsetSyncEmitter | None) -> AtLeastOnceWriter | TransactionalWriter:
        source, target = self.replication.source, self.replication.target
        if not self.exactly_once:
            more = functools.partial(clients.copy_producer, self.config, self.replication, self.limits)
            producers = CopyProducers(self.producer, more, *self.producers_spread)
            return AtLeastOnceWriter(self.producer, source, progress_topic(source), emitter, self.limits,
                                     producers)
        factory = functools.partial(clients.transactional_producer, self.config, self.replication,
                                    self.limits)
        return TransactionalWriter(factory, source, progress_topic(source), group_id(source, target), emitter,
                                   self.limits)

    def _control_changed(self) -> bool:
        if self.control is None:
            return False
        version = self.control.version()
        changed = self._control_version is not None and version != self._control_version
        self._control_version = version
        return changed

    def _control_lists(self) -> tuple[frozenset[str], frozenset[str]]:  # srm-control's allow, deny
        source, target, control = self.replication.source, self.replication.target, self.control
        return control.topic_lists(source, target) if control is not None else (frozenset(), frozenset())

    def _eligible_topics(self) -> dict[str, int]:
        return self.topic_sync.refresh(*self._control_lists())

    def _apply_topics(self, eligible: dict[str, int]) -> None:
        if eligible != self._topics:
            self._subscribe(eligible)
        self.refreshes += 1
        self.refusals.note(self.topic_sync.refusal, REFRESH_RETRY_S)

    def _start_acl_pass(self) -> bool:
        """Starts an ACL pass beside the loop (False while the last one runs); the lists are taken now."""
        if self.acl_sync is None:  # the loop asks only when ACLs are synced
            return False
        eligible = functools.partial(self.topic_sync.is_eligible, lists=self._control_lists())
        return self.acl_sync.start_pass(self.source_admin, self.target_admin, eligible)

    def _subscribe(self, eligible: dict[str, int]) -> None:
        source, target = self.replication.source, self.replication.target
        LOG.info("%s->%s replicates %d topics: %s", source, target, len(eligible), sorted(eligible))
        self._topics = eligible
        self.stats.topics_replicated = len(eligible)
        # Topics or partitions added or gone: the owned tasks' partitions change, no other's.
        wanted = task_partitions(eligible, self.tasks.owned, self.tasks_max)
        held = set(self.writer.flows)
        self._release(sorted(held - wanted), lost=False)
        self._assign(sorted(wanted - held))

    def _start_tasks(self, tasks: set[int]) -> None:
        LOG.info("%s->%s took task(s) %s of %d", self.replication.source, self.replication.target,
                 sorted(tasks), self.tasks_max)
        self._assign(sorted(task_partitions(self._topics, tasks, self.tasks_max)))

    def _tasks_left(self, tasks: set[int], lost: bool) -> None:
        """Runs in the group's revoke (or lost) callback: the tasks are released before another worker
        is given them."""
        self._release(sorted(k for k, flow in self.writer.flows.items() if flow.task in tasks), lost)
        self.writer.retire(tasks)
        LOG.info("%s->%s %s task(s) %s", self.replication.source, self.replication.target,
                 "lost" if lost else "released", sorted(tasks))

    def _assign(self, keys: list[tuple[str, int]]) -> None:
        if not keys:
            return
        if self.emitter is not None:  # a new lifetime for these partitions: their first record is synced
            self.emitter.forget(keys)
        began = time.monotonic()
        if isinstance(self.writer, TransactionalWriter):  # before reading progress: aborts a zombie's work
            self.writer.fence({task_of(topic, partition, self.tasks_max) for topic, partition in keys})
        fenced = time.monotonic()
        self.progress.read_to_end(PROGRESS_READ_TIMEOUT_S)
        read = time.monotonic()
        reported = self._last_reports(keys)
        LOG.info("%s->%s: %d partition(s) fenced in %.1f s, their progress read in %.1f s, their last "
                 "reports in %.1f s", self.replication.source, self.replication.target, len(keys),
                 fenced - began, read - fenced, time.monotonic() - read)
        flows, positions, recovered = [], [], []
        for topic, partition in keys:
            last = self.progress.last_replicated(topic, partition)
            start = resume_offset(last)
            positions.append(TopicPartition(topic, partition, OFFSET_INVALID if start is None else start))
            flows.append(self._flow(topic, partition, -1 if start is None else start - 1))
            flows[-1].stats.recovered_count += uncounted(last, reported.get((topic, partition)))
            if flows[-1].stats.recovered_count:
                recovered.append(f"{topic}[{partition}]: {flows[-1].stats.recovered_count}")
        if recovered:
            LOG.info("%s->%s counts records copied before a restart and never reported: %s",
                     self.replication.source, self.replication.target, ", ".join(recovered))
        self.writer.add(flows)
        LOG.info("%s->%s assigned %s", self.replication.source, self.replication.target,
                 ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in positions))
        self.consumer.incremental_assign(positions)

    def _last_reports(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Up to where the partitions' last reports counted (driver.count_recovery); nothing when the
        metrics topic cannot be read, which only leaves a crash's lost counts lost."""
        reader = clients.metrics_reader(self.config, self.replication)
        try:
            return self.last_reports.read(reader, keys, tail_size(sum(self._topics.values())),
                                          LAST_REPORTS_READ_TIMEOUT_S)
        except KafkaException as exc:
            LOG.warning("%s: the last metrics reports are not readable (%s); counts a crash lost before "
                        "this start are not recovered", self.replication.name, exc)
            return {}
        finally:
            reader.close()

    def _flow(self, topic: str, partition: int, last_replicated: int) -> PartitionFlow:
        remote = self.policy.format_remote_topic(self.replication.source, topic)
        stats = self.stats.partition(topic, partition, remote)
        if last_replicated >= 0:
            stats.upstream_offset = last_replicated
        return PartitionFlow(topic, partition, remote, stats, acked=last_replicated,
                             persisted=last_replicated, produced=last_replicated,
                             task=task_of(topic, partition, self.tasks_max))

    def _release(self, keys: list[tuple[str, int]], lost: bool) -> None:
        if not keys:
            return
        self.writer.release(keys, lost=lost)
        self.flow.unassigned(self.consumer, keys)
        if self.emitter is not None:
            self.emitter.forget(keys)
        self._produce_metrics(self.stats.retire(set(keys)))
        self.producer.flush(FINAL_REPORT_FLUSH_S)
        LOG.info("%s->%s %s %s", self.replication.source, self.replication.target,
                 "lost" if lost else "released", ", ".join(f"{t}[{p}]" for t, p in keys))
        self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in keys])

    def _publish_metrics(self) -> None:
        tasks = self._update_levels()
        # The status is the replication's (Connect's connector state), not this worker's: a standby
        # holding no partition must not report UNASSIGNED over the RUNNING of the worker that does.
        running = bool(self.writer.flows) or bool(tasks)
        self.stats.status = DriverStatus.RUNNING if running else DriverStatus.UNASSIGNED
        self.stats.error = None
        if self.flow.outage is not None:  # Connect's FAILED with its trace: the reason, while it lasts
            self.stats.status, self.stats.error = DriverStatus.FAILED, self.flow.outage
        elif self.refusals.reason is not None:
            self.stats.status, self.stats.error = DriverStatus.FAILED, self.refusals.reason[:300]
        records = self.stats.drain()
        if self.stats.status is DriverStatus.UNASSIGNED and tasks is None:  # no count yet: no status
            records = [r for r in records if not isinstance(r, raw_metrics.ReplicationMetrics)]
        self._produce_metrics(records)
        self.backoff.succeeded()

    def _update_levels(self) -> int | None:
        """Refreshes end offsets and group membership; how many workers hold partitions (None: unknown)."""
        for flow in list(self.writer.flows.values()):
            _, end = self.consumer.get_watermark_offsets(TopicPartition(flow.topic, flow.partition),
                                                         cached=True)
            if end is not None and end >= 0:
                flow.stats.source_end_offset = end
        membership = self.census.latest
        if membership is None:
            return None
        self.stats.workers = max(1, membership.members)
        self.stats.tasks = membership.members_with_partitions
        return membership.members_with_partitions

    def _publish_failure(self) -> None:
        try:
            self._produce_metrics(self.stats.drain())
            self.producer.flush(10)
        except Exception as exc:  # the target itself may be what failed
            LOG.warning("cannot publish the FAILED status of %s: %s", self.replication.name, exc)

    def _produce_metrics(self, records: Sequence[raw_metrics.RawMetrics]) -> None:
        topic = metrics_topic(self.replication.source)
        # At least once they share the copy's producer, whose refusals fail the worker.
        writer = getattr(self, "writer", None)
        delivered = writer.delivered if isinstance(writer, AtLeastOnceWriter) else None
        for record in records:
            key, value = raw_metrics.encode(record)
            self.producer.produce(topic, value=value, key=key, on_delivery=delivered)
        self.producer.poll(0)
