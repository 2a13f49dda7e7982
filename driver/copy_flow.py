"""How one replication's copy loop rides out outages: paused partitions, the outage it reports, and
topic refreshes that run beside the loop.

- ``CopyFlow.pause_backlogged`` pauses the source partitions whose records wait for room in the send
  queue (``driver.send_queue``) and resumes them once their backlog is sent. librdkafka drops what it
  fetched ahead for a paused partition and fetches again from the last record it handed us, which sits
  first in the backlog.
- ``CopyFlow.check_outage`` asks the source watch (``driver.source_watch``) and the send queue whether
  either cluster stopped answering; the reason is reported as the replication's FAILED status while it
  lasts, and its start and end are logged once.
- ``BackgroundRefresh`` runs a topic refresh on a thread of its own: its admin requests may wait out
  their timeout (30 s) on a cluster gone silent, and the copy must go on meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Final

from confluent_kafka import Consumer, KafkaException, TopicPartition

from clients.kafka_clients import ClusterUnavailable
from driver.send_queue import PartitionKey, SendQueue
from driver.source_watch import SourceWatch

LOG = logging.getLogger(__name__)

SILENT_TARGET_S: Final = 1.0


class CopyFlow:
    def __init__(self, name: str, target: str, source_watch: SourceWatch) -> None:
        self.name, self.target, self.source_watch = name, target, source_watch
        self.outage: str | None = None  # why nothing is copied now (source or target not answering)
        self._outage_began = 0.0
        self._paused: set[PartitionKey] = set()

    def pause_backlogged(self, consumer: Consumer, held: set[PartitionKey]) -> None:
        if held == self._paused:
            return
        pause, resume = held - self._paused, self._paused - held
        if pause:
            consumer.pause([TopicPartition(t, p) for t, p in sorted(pause)])
        if resume:
            consumer.resume([TopicPartition(t, p) for t, p in sorted(resume)])
        self._paused = held

    def clusters_silent(self, queue: SendQueue) -> bool:
        """An admin request now would wait out its timeout (30 s): the source is suspect, or the target
        acknowledged nothing for a second while records wait (under load it does every few ms)."""
        return self.source_watch.suspect or queue.unacknowledged_for() > SILENT_TARGET_S

    def unassigned(self, consumer: Consumer, keys: list[PartitionKey]) -> None:
        """Called before the partitions are unassigned. librdkafka keeps a partition's pause across a
        revoke and a later assignment of the same partition, and the backlog that paused it is gone with
        the revoke: resumed now, or it would come back paused for good."""
        paused = sorted(self._paused & set(keys))
        if paused:
            try:
                consumer.resume([TopicPartition(t, p) for t, p in paused])
            except KafkaException as exc:  # already gone from the assignment: nothing left to resume
                LOG.debug("%s: resume before unassign: %s", self.name, exc)
        self._paused -= set(keys)

    def check_outage(self, consumer: Consumer, queue: SendQueue, now: float) -> bool:
        """Looks for a source or target outage; True when one began or ended."""
        outage = (self.source_watch.outage(lambda timeout: consumer.list_topics(timeout=timeout), now)
                  or queue.outage(self.target, now))
        began, ended = outage is not None and self.outage is None, outage is None and self.outage is not None
        if began:
            self._outage_began = now
            LOG.warning("replication %s: %s; copying resumes when it answers", self.name, outage)
        elif ended:
            LOG.info("replication %s: outage over after %.0f s (%s); copying again", self.name,
                     now - self._outage_began, self.outage)
        self.outage = outage
        return began or ended


class BackgroundRefresh:
    """At most one refresh under way; its result (or exception) is taken by the loop's thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._future: Future[dict[str, int]] | None = None

    @property
    def running(self) -> bool:
        return self._future is not None

    def start(self, refresh: Callable[[], dict[str, int]]) -> None:
        future: Future[dict[str, int]] = Future()

        def run() -> None:
            try:
                future.set_result(refresh())
            except BaseException as exc:  # handed to the loop, which decides
                future.set_exception(exc)

        self._future = future
        threading.Thread(target=run, name=f"{self.name}: topic refresh", daemon=True).start()

    def apply_finished(self, apply: Callable[[dict[str, int]], None]) -> bool:
        """Applies a finished refresh (on the caller's thread); False when a cluster did not answer it:
        an outage to wait out, with the next attempt sooner, not a reason to leave the group."""
        future = self._future
        if future is None or not future.done():
            return True
        self._future = None
        try:
            apply(future.result())
            return True
        except ClusterUnavailable as exc:
            LOG.warning("%s: topic refresh failed (%s); trying again soon", self.name, exc)
            return False
