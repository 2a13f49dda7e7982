"""A lagging group fails over with Apache's RemoteClusterUtils: nothing skipped, little re-read.

The issue's scenario: 3,000 records on 3 partitions, then a group commits 300 / 240 / 517 (an
application far behind), then the driver starts east -> west with the default offset.lag.max. Apache's
own RemoteClusterUtils.translateOffsets reads the checkpoints our driver wrote; group offset sync
writes the same offsets into the idle west group; a consumer resuming there with auto.offset.reset =
latest must read every record it had not committed and re-read at most offset.lag.max + 1. MM2 4.3.1
translates all three partitions to offset 1 here (re-reading up to 517 records).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.interop.conftest import MirrorProbe
from tests.interop.support import (
    OFFSET_LAG_MAX,
    alter_group_offsets,
    committed,
    create_topic,
    end_offsets,
    produce_values,
    read_all,
    resume_group,
    running_driver,
    tag,
    total_records,
    wait_until,
)

pytestmark = [pytest.mark.interop, pytest.mark.integration]

SYNCS_TOPIC = "mm2-offset-syncs.west.internal"


def syncs_end(bootstrap: str) -> int:
    """Where the shared offset-syncs topic ends now (0 before it exists): records before it are other
    tests', some of them garbage on purpose (the driver's skip-bad-records tests)."""
    try:
        return end_offsets(bootstrap, SYNCS_TOPIC, 1)[0]
    except Exception:  # no such topic yet
        return 0


def syncs_of(probe: MirrorProbe, bootstrap: str, topic: str,
             since: int) -> dict[int, list[tuple[int, int]]]:
    """Offset syncs of `topic` in log order, per partition, as Apache's OffsetSync decodes them; every
    record from offset `since` on (this test's driver's) must decode."""
    answer = probe("decode", bootstrap, SYNCS_TOPIC, "offset-sync")
    assert all(offset < since for offset in answer["failedOffsets"]), answer["firstError"]
    syncs: dict[int, list[tuple[int, int]]] = {}
    for record in answer["records"]:
        if record["topic"] == topic:
            syncs.setdefault(record["partition"], []).append((record["upstream"], record["downstream"]))
    return syncs


def translated(probe: MirrorProbe, west: str, group: str, remote: str,
               partitions: int) -> dict[int, int] | None:
    answer = probe("translate", west, "east", group, "15000")
    offsets = {int(key.rsplit(":", 1)[1]): value for key, value in answer.items()
               if key.rsplit(":", 1)[0] == remote}
    return offsets if len(offsets) == partitions else None


def translated_within_bound(probe: MirrorProbe, west: str, group: str, remote: str,
                            exact: dict[int, int]) -> dict[int, int]:
    """Apache's translation once every partition is within offset.lag.max + 1 of `exact`. Checkpoints
    emitted while the copy was under way translate from the syncs of that moment (lower); none may
    ever pass `exact`, which would skip records."""
    def answer() -> dict[int, int] | None:
        offsets = translated(probe, west, group, remote, len(exact))
        if offsets is None:
            return None
        assert all(offsets[p] <= e for p, e in exact.items()), f"{offsets} skips records: exact {exact}"
        return offsets if all(e - (OFFSET_LAG_MAX + 1) <= offsets[p] for p, e in exact.items()) else None

    return wait_until(answer, 90, f"translateOffsets within offset.lag.max + 1 of {exact}")


def synced_as_translated(probe: MirrorProbe, west: str, group: str, remote: str, partitions: int) -> None:
    """Group offset sync holds the offsets Apache translates (asked again each time: a checkpoint may
    still improve while the last syncs arrive)."""
    wait_until(lambda: committed(west, group, remote, partitions) == translated(probe, west, group, remote,
                                                                                partitions),
               90, f"west {group} to hold the translated offsets")


def assert_resumes_within_bound(west: str, group: str, remote: str, exact: dict[int, int],
                                values_from: dict[int, list[str]]) -> None:
    """The resumed consumer reads every value at or after the exact position, and at most
    offset.lag.max + 1 from before it. `values_from[p]` lists partition p's values in source order."""
    ends = end_offsets(west, remote, len(exact))
    read = resume_group(west, group, remote, ends)
    for partition, position in exact.items():
        source = values_from[partition]
        got = set(read[partition])
        missing = [v for v in source[position:] if v not in got]
        assert not missing, f"partition {partition}: skipped {len(missing)} records, first {missing[:3]}"
        re_read = [v for v in source[:position] if v in got]
        assert len(re_read) <= OFFSET_LAG_MAX + 1, f"partition {partition} re-read {len(re_read)}"


def lagging_group(east: str, name: str, per_partition: int, lagging: dict[int, int]) -> tuple[str, str, str]:
    """A fresh topic `name-<tag>` with `per_partition` values in each of `len(lagging)` partitions and
    a group committed at `lagging`; returns the topic, the group and the remote topic's name."""
    suffix = tag()
    topic, group = f"{name}-{suffix}", f"g1-{suffix}"
    create_topic(east, topic, len(lagging))
    produce_values(east, topic, len(lagging), per_partition)
    alter_group_offsets(east, group, topic, lagging)
    return topic, group, f"east.{topic}"


def test_lagging_group_translates_tightly_through_remote_cluster_utils(
        kafka_clusters: dict[str, str], mirror_probe: MirrorProbe, tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    lagging = {0: 300, 1: 240, 2: 517}
    topic, group, remote = lagging_group(east, "orders", 1000, lagging)

    settings = {"topics": topic, "groups": group}
    since = syncs_end(east)
    with running_driver(tmp_path, {"east": east, "west": west}, [("east", "west")], settings) as driver:
        wait_until(lambda: total_records(west, remote, 3) == 3000, 90, "3,000 records on west")

        # (a) The first sync of each partition is at its first replicated record, every due sync
        # of the MM2 rules (0, 101, ..., 909) is there, and the last position follows a flush.
        syncs = wait_until(lambda: s if (s := syncs_of(mirror_probe, east, topic, since))
                           and all(s.get(p, [(0, 0)])[-1][0] == 999 for p in range(3)) else None,
                           90, "the last position of every partition in the offset syncs")
        for partition in range(3):
            assert syncs[partition][0] == (0, 0)
            assert {up for up, _ in syncs[partition]} >= set(range(0, 1000, OFFSET_LAG_MAX + 1))

        # (b) Apache's RemoteClusterUtils, reading our checkpoints: every partition, within the bound.
        # No gaps: remote offset == source offset.
        translated_within_bound(mirror_probe, west, group, remote, lagging)

        # (c) Group offset sync wrote the same offsets into the idle west group.
        synced_as_translated(mirror_probe, west, group, remote, 3)
        driver.assert_running()

    # (d) The failed-over application resumes: nothing skipped, little re-read.
    source_values = {p: [f"p{p}-{i:04d}" for i in range(1000)] for p in range(3)}
    assert_resumes_within_bound(west, group, remote, lagging, source_values)


def produce_transactions(bootstrap: str, topic: str, records: int, per_transaction: int) -> None:
    """A transactional producer: every `per_transaction` records a commit marker takes an offset."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "linger.ms": 5})
    producer.init_transactions(30)
    for start in range(0, records, per_transaction):
        producer.begin_transaction()
        for i in range(start, min(records, start + per_transaction)):
            producer.produce(topic, value=f"p0-{i:04d}".encode(), partition=0)
        producer.commit_transaction(30)


def test_transactional_source_translates_tightly(kafka_clusters: dict[str, str], mirror_probe: MirrorProbe,
                                                 tmp_path: Path) -> None:
    # Commit markers leave an upstream gap after every transaction: MM2 sends a group at the 1,000th
    # record back to the first one.
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    suffix = tag()
    topic, group, remote = f"tx-orders-{suffix}", f"g1-{suffix}", f"east.tx-orders-{suffix}"
    create_topic(east, topic, 1)
    produce_transactions(east, topic, 1100, 10)
    source = read_all(east, topic, 0)
    assert len(source) == 1100
    thousandth = source[999].offset()  # looked up, not computed: markers decide it
    alter_group_offsets(east, group, topic, {0: thousandth})

    settings = {"topics": topic, "groups": group}
    with running_driver(tmp_path, {"east": east, "west": west}, [("east", "west")], settings) as driver:
        wait_until(lambda: total_records(west, remote, 1) == 1100, 90, "1,100 records on west")
        exact = 999  # the driver writes the 1,100 records contiguously: the 1,000th is at 999
        translated_within_bound(mirror_probe, west, group, remote, {0: exact})
        synced_as_translated(mirror_probe, west, group, remote, 1)
        driver.assert_running()

    assert_resumes_within_bound(west, group, remote, {0: exact},
                                {0: [m.value().decode() for m in source]})


def test_offset_syncs_on_the_target_translate_through_remote_cluster_utils(
        kafka_clusters: dict[str, str], mirror_probe: MirrorProbe, tmp_path: Path) -> None:
    # offset-syncs.topic.location = target: MM2 writes the syncs of east -> west on west, named for
    # east, and its checkpoint task reads them there. The writer and the checkpoint reader must agree.
    east, west = kafka_clusters["east"], kafka_clusters["west"]
    topic, group, remote = lagging_group(east, "ledger", 600, {0: 450})

    settings = {"topics": topic, "groups": group, "offset-syncs.topic.location": "target"}
    since = syncs_end(east)
    with running_driver(tmp_path, {"east": east, "west": west}, [("east", "west")], settings) as driver:
        wait_until(lambda: total_records(west, remote, 1) == 600, 90, "600 records on west")

        def synced_on_west() -> list[tuple[int, int]]:
            answer = mirror_probe("decode", west, "mm2-offset-syncs.east.internal", "offset-sync")
            assert not answer["failedOffsets"], answer["firstError"]
            return [(r["upstream"], r["downstream"]) for r in answer["records"] if r["topic"] == topic]

        syncs = wait_until(lambda: s if (s := synced_on_west()) and s[-1][0] == 599 else None, 90,
                           "the last position in the offset syncs on west")
        assert syncs[0] == (0, 0)
        assert {up for up, _ in syncs} >= set(range(0, 600, OFFSET_LAG_MAX + 1))
        assert syncs_end(east) == since, "syncs written on the source too"

        translated_within_bound(mirror_probe, west, group, remote, {0: 450})
        driver.assert_running()
