"""A new or restarted worker is replicating soon after it starts, on real brokers (issue 19).

The target is 5 s on an idle machine; a test cannot time that without flaking under a loaded CI
machine, so the bench measures it (`assign_s` of ``bench/replication.py --scale``) and this test proves
the mechanism instead: the group settles by the protocol (a joining member triggers a cooperative
rebalance; a cleanly stopped one leaves the group) and a worker takes its tasks in its copy loop, fence
and progress read included, never waiting out a session timeout. So the workers here keep the
consumer's default session timeout (45 s) and each hand-over must finish well inside it; what it took
is logged.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

from tests.driver.replication_cluster_ops import create_topic, eventually, produce, read_topic
from tests.driver.test_replication_tasks import Worker, write_config

LOG = logging.getLogger(__name__)

PARTITIONS, TASKS = 6, 2
DEFAULT_SESSION_TIMEOUT_S = 45.0
# Well inside the session timeout, with room for a loaded machine (a few seconds when idle).
HANDOVER_BOUND_S = 30.0
DEFAULT_GROUP_TIMEOUTS = {"source.consumer.session.timeout.ms": int(DEFAULT_SESSION_TIMEOUT_S * 1000),
                          "source.consumer.heartbeat.interval.ms": 3000}


def _held_within(worker: Worker, topic: str, began: float, what: str, want: int | None = None) -> float:
    def holds() -> bool:
        # The topic's partitions only: a `heartbeats` topic that earlier tests left on the source is
        # replicated too (MM2 copies heartbeats), and would count.
        held = {key for key in worker.held() if key[0] == topic}
        return len(held) == want if want is not None else bool(held)

    eventually(holds, what, timeout_s=HANDOVER_BOUND_S)
    took = time.monotonic() - began
    LOG.warning("%s after %.1f s", what, took)
    return took


def test_a_joining_and_a_restarted_worker_take_tasks_without_a_session_timeout(
        kafka_clusters: dict[str, str], tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"handover-{uuid.uuid4().hex[:8]}"
    create_topic(east, topic, PARTITIONS)
    config = write_config(tmp_path, kafka_clusters, {"topics": topic, "tasks.max": TASKS,
                                                     "exactly.once": "true", **DEFAULT_GROUP_TIMEOUTS})
    first, second, third = (Worker(config, name) for name in ("worker-a", "worker-b", "worker-a2"))
    try:
        began = time.monotonic()
        first.thread.start()
        _held_within(first, topic, began, "a lone worker holding every partition", PARTITIONS)
        began = time.monotonic()
        second.thread.start()  # joins: one task moves to it, the other stays
        _held_within(second, topic, began, "a joining worker holding a task")
        eventually(lambda: len({k for k in first.held() | second.held() if k[0] == topic}) == PARTITIONS
                   and not first.held() & second.held(), "tasks split")
        first.stop()  # leaves the group: its task moves now, not after its session times out
        began = time.monotonic()
        third.thread.start()
        _held_within(third, topic, began, "a restarted worker holding a task")
        values = produce(east, topic, 300, tag="after")
        copied = [r.value for r in read_topic(west, f"east.{topic}", 300) if r.value is not None]
        assert sorted(copied) == sorted(values)
    finally:
        for worker in (first, second, third):
            if worker.thread.is_alive():
                worker.stop()
