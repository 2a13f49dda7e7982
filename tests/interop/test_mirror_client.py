"""Apache's MirrorClient and record classes read what our driver wrote, hop by hop.

Topology (one driver): `far -> east -> west` replicate, and disabled pairs into east and far still
send heartbeats there (MM2's default), so every cluster has a `heartbeats` topic. West then holds
`east.heartbeats` (east's heartbeats, one hop) and `east.far.heartbeats` (far's, two hops). The three
clusters are this module's own: the heartbeats topics it leaves behind must not reach other tests'
replications, and theirs must not answer for `far` here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from stack.kafka_cluster import KafkaClusters
from tests.interop.conftest import MirrorProbe
from tests.interop.support import (
    alter_group_offsets,
    create_topic,
    produce_values,
    read_all,
    running_driver,
    tag,
    total_records,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.integration]


@dataclass(frozen=True)
class Written:
    east: str
    west: str
    far_alias: str
    topic: str
    group: str


@pytest.fixture(scope="module")
def three_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    clusters = KafkaClusters(["east", "west", "far"], root=tmp_path_factory.mktemp("hops")).start()
    try:
        yield {alias: clusters.bootstrap(alias) for alias in clusters.clusters}
    finally:
        clusters.cleanup()


@pytest.fixture(scope="module")
def written(three_clusters: dict[str, str], mirror_probe: MirrorProbe,
            tmp_path_factory: pytest.TempPathFactory) -> Written:
    """Runs the driver until every internal topic holds records, then stops it cleanly."""
    east, west, far_servers = three_clusters["east"], three_clusters["west"], three_clusters["far"]
    suffix = tag()
    far, topic, group = "far", f"orders-{suffix}", f"g-{suffix}"
    create_topic(east, topic, 2)
    produce_values(east, topic, 2, 300)
    alter_group_offsets(east, group, topic, {0: 120, 1: 250})
    bootstraps = {"east": east, "west": west, far: far_servers}
    settings = {"topics": topic, "groups": group}
    with running_driver(tmp_path_factory.mktemp("mirror-client"), bootstraps,
                        [(far, "east"), ("east", "west")], settings, targets=["west", "east", far]) as driver:
        wait_until(lambda: total_records(west, f"east.{topic}", 2) == 600, 90, "600 records on west")
        for remote in ("east.heartbeats", f"east.{far}.heartbeats"):
            def heartbeats(r: str = remote) -> bool:
                return total_records(west, r, 1) > 0
            wait_until(heartbeats, 60, f"{remote} on west")

        def checkpointed() -> bool:
            answer = mirror_probe("decode", west, "east.checkpoints.internal", "checkpoint")
            return {r["partition"] for r in answer["records"] if r["group"] == group} == {0, 1}

        wait_until(checkpointed, 60, f"checkpoints of {group}")
        driver.assert_running()
    return Written(east, west, far, topic, group)


def test_mirror_client_reads_our_target(written: Written, mirror_probe: MirrorProbe) -> None:
    client = mirror_probe("client", written.west, "east")
    assert set(client["heartbeatTopics"]) >= {"heartbeats", "east.heartbeats",
                                              f"east.{written.far_alias}.heartbeats"}
    assert "east.checkpoints.internal" in client["checkpointTopics"]
    assert set(client["upstreamClusters"]) >= {"east", written.far_alias}
    assert client["replicationHops"] == 1
    assert set(client["remoteTopics"]) >= {f"east.{written.topic}", "east.heartbeats",
                                           f"east.{written.far_alias}.heartbeats"}
    # MM2's internal topics are not remote topics. MM2 counts as internal only `mm2*.internal`,
    # checkpoints and `__`/`.` topics, so our own srm-control.internal and srm-metrics.<src>.internal
    # read as remote topics of clusters "srm-control" and "srm-metrics" (documented in failover.md).
    internal = {t for t in client["remoteTopics"] if t.endswith(".internal")}
    assert internal <= {"srm-control.internal"} | {t for t in internal if t.startswith("srm-metrics.")}
    assert "east.checkpoints.internal" not in client["remoteTopics"]

    two_hops = mirror_probe("client", written.west, written.far_alias)
    assert two_hops["replicationHops"] == 2


def decoded(probe: MirrorProbe, bootstrap: str, topic: str, kind: str) -> list[dict]:
    """Every record of the topic, decoded by Apache's class; the count is checked against a plain read."""
    answer = probe("decode", bootstrap, topic, kind)
    assert answer["failures"] == 0, f"{topic}: {answer['firstError']}"
    assert answer["decoded"] == len(read_all(bootstrap, topic, 0)) > 0
    return answer["records"]


def test_every_internal_record_deserializes_with_apache_classes(written: Written,
                                                                mirror_probe: MirrorProbe) -> None:
    far = written.far_alias
    heartbeats = decoded(mirror_probe, written.west, "heartbeats", "heartbeat")
    assert {"east", far} <= {h["source"] for h in heartbeats if h["target"] == "west"}

    # Hop by hop: west's east.heartbeats holds east's heartbeats records (their target is east),
    # and east.<far>.heartbeats holds far's (their target is far).
    one_hop = decoded(mirror_probe, written.west, "east.heartbeats", "heartbeat")
    assert {h["target"] for h in one_hop} == {"east"}
    assert far in {h["source"] for h in one_hop}
    two_hops = decoded(mirror_probe, written.west, f"east.{far}.heartbeats", "heartbeat")
    assert {h["target"] for h in two_hops} == {far}
    assert "east" in {h["source"] for h in two_hops}

    checkpoints = decoded(mirror_probe, written.west, "east.checkpoints.internal", "checkpoint")
    ours = {(c["topic"], c["partition"]): c for c in checkpoints if c["group"] == written.group}
    assert {(t, p) for t, p in ours} == {(f"east.{written.topic}", 0), (f"east.{written.topic}", 1)}
    assert ours[(f"east.{written.topic}", 0)]["upstream"] == 120
    assert ours[(f"east.{written.topic}", 1)]["upstream"] == 250

    syncs = decoded(mirror_probe, written.east, "mm2-offset-syncs.west.internal", "offset-sync")
    first: dict[int, tuple[int, int]] = {}
    for sync in syncs:
        if sync["topic"] == written.topic:
            first.setdefault(sync["partition"], (sync["upstream"], sync["downstream"]))
    assert first == {0: (0, 0), 1: (0, 0)}
