"""Counts the workers of a replication's consumer group beside the copy loop, never in it.

A DescribeGroups request goes to the group coordinator and may wait out its whole timeout (30 s): while
the source cluster is down, and (seen with librdkafka 2.16) on every request of an admin client that
lived through a restart of the coordinator's broker, although a new client is answered at once. Asked
from the copy loop, each such wait stopped copying for 30 s every metrics period. So the count runs on a
thread of its own, at most one at a time; the loop reads the last answer. The requests go through a
``GroupAdmin``, which replaces a client that got no answer.
"""

from __future__ import annotations

import logging
import threading

from clients import kafka_clients
from clients.kafka_clients import ClusterUnavailable, GroupAdmin, GroupMembership

LOG = logging.getLogger(__name__)


class WorkerCensus:
    def __init__(self, replication: str, group: str, groups: GroupAdmin) -> None:
        self.replication, self.group, self._groups = replication, group, groups
        self._lock = threading.Lock()
        self._running = False
        self._latest: GroupMembership | None = None
        self._failing = False

    @property
    def latest(self) -> GroupMembership | None:
        """The last answer (kept while later counts fail), or None before the first."""
        with self._lock:
            return self._latest

    def request(self) -> None:
        """Starts a count unless one is under way."""
        with self._lock:
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._count, name=f"{self.replication}: worker census", daemon=True).start()

    def _count(self) -> None:
        try:
            membership = kafka_clients.group_membership(self._groups, self.group)
        except ClusterUnavailable as exc:
            if not self._failing:
                LOG.warning("cannot count the workers of %s (keeping the last count until it can): %s",
                            self.replication, exc)
            self._failing = True
        except Exception:  # a census thread must end, and say why, whatever went wrong
            LOG.exception("counting the workers of %s failed", self.replication)
        else:
            if self._failing:
                LOG.info("counting the workers of %s again", self.replication)
            self._failing = False
            with self._lock:
                self._latest = membership
        finally:
            with self._lock:
                self._running = False

