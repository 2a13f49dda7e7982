"""A topic-ACL pass never runs on the copy loop's thread: a pass that hangs (a cluster slow to answer
describe or create, thousands of bindings matched against long srm-control lists) leaves the records
flowing."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from driver.acl_sync import TopicAclSync
from tests.driver.replication_cluster_ops import create_topic, eventually, produce, remote_values
from tests.driver.test_replication_integration import running, write_config

pytestmark = pytest.mark.integration


def test_a_hanging_acl_pass_does_not_hold_up_the_copy(kafka_clusters: dict[str, str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    release, passes = threading.Event(), []

    def hanging_pass(self: TopicAclSync, source_admin: AdminClient, target_admin: AdminClient,
                     eligible: object) -> None:
        passes.append(threading.current_thread().name)
        release.wait(300)

    monkeypatch.setattr(TopicAclSync, "_sync", hanging_pass)
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic = f"aclpass-{uuid.uuid4().hex[:8]}"
    create_topic(east, topic, 1)
    config = write_config(tmp_path, kafka_clusters, [("east", "west")],
                          {"topics": topic, "sync.topic.acls.interval.seconds": 0.1})
    try:
        with running(config) as workers:
            worker = workers["east->west"]
            sent = produce(east, topic, 30)
            eventually(lambda: passes, "an ACL pass to start")
            assert remote_values(west, f"east.{topic}", len(sent)) == sorted(sent)  # while the pass hangs
            assert passes == ["acl-sync-east->west"] and worker.name not in passes
            assert worker.acl_sync is not None and worker.acl_sync.running  # still the one pass
    finally:
        release.set()
