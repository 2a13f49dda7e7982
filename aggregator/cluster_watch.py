"""Probes each target cluster and keeps the verdict in Redis, so the API can show an outage as it happens.

While a target cluster is down nothing new reaches Redis about it: the driver's reports wait in its
producer and Spark's Kafka source reads nothing. Without a word from here the service would only see
reports going stale. Every ``PROBE_INTERVAL_S`` a metadata request (bounded by ``PROBE_TIMEOUT_S``)
asks each target; the result is written to ``contract.redis_layout.cluster_reachability_key`` with a
TTL, so a stopped aggregator leaves no verdict behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Final

import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from contract import redis_layout as layout

LOG = logging.getLogger(__name__)

PROBE_INTERVAL_S: Final = 5.0
PROBE_TIMEOUT_S: Final = 5.0


class ClusterWatch(threading.Thread):
    def __init__(self, redis_client: redis.Redis, admins: Mapping[str, AdminClient],
                 stopping: threading.Event, interval_s: float = PROBE_INTERVAL_S) -> None:
        super().__init__(name="cluster-watch", daemon=True)
        self.redis, self.admins, self.stopping, self.interval_s = redis_client, admins, stopping, interval_s
        self._state: dict[str, tuple[bool, int]] = {}  # target -> (reachable, since ms)

    def run(self) -> None:
        while not self.stopping.is_set():
            for target, admin in self.admins.items():
                self.probe(target, admin)
            self.stopping.wait(self.interval_s)

    def probe(self, target: str, admin: AdminClient) -> bool:
        now_ms = int(time.time() * 1000)
        error: str | None = None
        try:
            admin.list_topics(timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0].str() if exc.args else str(exc)
        reachable = error is None
        previous = self._state.get(target)
        if previous is None or previous[0] != reachable:
            if previous is not None or not reachable:
                log = LOG.info if reachable else LOG.warning
                log("target cluster %s %s", target, "answers again" if reachable else f"unreachable: {error}")
            self._state[target] = (reachable, now_ms)
        record = {"ts": now_ms, "reachable": reachable, "since": self._state[target][1], "error": error}
        try:
            self.redis.set(layout.cluster_reachability_key(target), layout.encode_latest(record),
                           px=layout.CLUSTER_PROBE_TTL_MS)
        except redis.RedisError as exc:  # Redis has its own watchdogs; the next probe writes again
            LOG.debug("cannot record the reachability of %s: %s", target, exc)
        return reachable
