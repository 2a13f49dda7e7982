"""compose.yaml run as a user runs it (with deploy/compose.local.yaml where no registry answers): two
sites and a gateway from the repository's Dockerfile, checked through their published ports.

The tests run in file order on one project: each waits for what it checks, so a slow machine only makes
them slower. Records are produced from inside the project's network (the gateway's container has the
Kafka client). Counts follow the driver's rule (docs/operations.md, "driver killed"): every record
produced is counted, and a count passes what was produced only by records a restarted driver copied
again (MM2 counts what it sends), so never past what the remote topic holds: that fails at once.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.containers.compose_stack import SRM_PARTS, ComposeStack, wait_for

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]
FIRST_ANSWER_S = 900.0  # two brokers, two Spark drivers, three gunicorns on a busy 2-core machine
COUNT_S = 600.0
ORDERS = "orders"
PRODUCER = """
import sys
from confluent_kafka import Producer
bootstrap, topic, count, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
for i in range(count):
    producer.produce(topic, key=f"{tag}-{i}".encode(), value=b"x" * 100)
left = producer.flush(120)
print(count - left)
sys.exit(1 if left else 0)
"""
REMOTE_RECORDS = """
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic = sys.argv[1], sys.argv[2]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "remote-records"})
partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
print(sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions))
consumer.close()
"""
# What each site's service counts: its driver copies the other site's `orders`.
SOURCE_OF = {"east": "west", "west": "east"}
produced = dict.fromkeys(SOURCE_OF, 0)


class CountedTwice(AssertionError):
    pass


def get_json(stack: ComposeStack, port: str, path: str) -> dict[str, Any] | None:
    """The JSON object a 200 answers (every path asked here answers an object); None otherwise."""
    answer = requests.get(stack.url(port, path), timeout=15)
    if answer.status_code != 200:
        return None
    body = answer.json()
    if not isinstance(body, dict):
        raise ValueError(f"{path} answered {body!r}, not a JSON object")
    return body


def produce(stack: ComposeStack, site_counted: str, count: int, tag: str) -> None:
    """`count` records into the `orders` topic that `site_counted`'s driver copies."""
    source = SOURCE_OF[site_counted]
    out = stack.exec("gateway", "python", "-c", PRODUCER, f"kafka-{source}:9092", ORDERS, str(count), tag)
    assert out.split() == [str(count)], out
    produced[site_counted] += count


def remote_records(stack: ComposeStack, site: str) -> int:
    """Records in the remote topic the site's driver writes (`<source>.orders` in the site's cluster)."""
    out = stack.exec("gateway", "python", "-c", REMOTE_RECORDS, f"kafka-{site}:9092",
                     f"{SOURCE_OF[site]}.{ORDERS}")
    return int(out.split()[-1])


def record_count(stack: ComposeStack, site: str) -> int | None:
    body = get_json(stack, site, f"/v2/topic-metrics/{SOURCE_OF[site]}/{site}/{ORDERS}/record_count")
    total = body.get("sum") if isinstance(body, dict) else None
    if total is not None and total > produced[site]:
        copied = remote_records(stack, site)  # more than produced only by copies made again
        if total > copied:
            raise CountedTwice(f"site {site} counts {total} records of {ORDERS}, its driver wrote {copied} "
                               f"({produced[site]} were produced)")
    return total


def counts_every_record(stack: ComposeStack, site: str) -> bool:
    total = record_count(stack, site)
    return total is not None and total >= produced[site]


def wait_for_counts(stack: ComposeStack, what: str) -> None:
    for site in SOURCE_OF:
        def reached(s: str = site) -> bool:
            return counts_every_record(stack, s)
        wait_for(f"site {site}'s record_count of {ORDERS} reaching {produced[site]} ({what})", reached,
                 COUNT_S, describe=stack.describe)


def test_both_sites_services_answer(compose_stack: ComposeStack):
    for site in SOURCE_OF:
        services = wait_for(f"service-{site} answering /v2/services",
                            functools.partial(get_json, compose_stack, site, "/v2/services"), FIRST_ANSWER_S,
                            describe=compose_stack.describe)
        assert site in {service["site"] for service in services["services"]}, services


def test_every_part_passes_its_healthcheck(compose_stack: ComposeStack):
    for service in ("kafka-east", "kafka-west", *SRM_PARTS):
        wait_for(f"{service}'s healthcheck passing", functools.partial(compose_stack.healthy, service), 600,
                 every_s=10, describe=compose_stack.describe)


def test_the_gateway_lists_both_sites_found_through_heartbeats(compose_stack: ComposeStack):
    def sites() -> set[str] | None:
        answer = get_json(compose_stack, "gateway", "/v2/services?site=all")
        ok = {s["site"] for s in answer["sites"] if s["status"] == "ok"} if answer else set()
        return ok if {"east", "west"} <= ok else None

    wait_for("the gateway discovering east and west", sites, 600, describe=compose_stack.describe)


def test_site_all_answers_for_both_sites(compose_stack: ComposeStack):
    def replications() -> dict | None:
        answer = get_json(compose_stack, "gateway", "/v2/replications?site=all")
        statuses = {s["site"]: s["status"] for s in answer["sites"]} if answer else {}
        return answer if statuses.get("east") == statuses.get("west") == "ok" else None

    answer = wait_for("the gateway's site=all answering for both sites", replications, 600,
                      describe=compose_stack.describe)
    assert {"east", "west"} <= set(answer["results"]), answer


def test_record_counts_grow_end_to_end(compose_stack: ComposeStack):
    for site in SOURCE_OF:
        produce(compose_stack, site, 300, "first")
    wait_for_counts(compose_stack, "first 300")
    for site in SOURCE_OF:
        produce(compose_stack, site, 200, "second")
    wait_for_counts(compose_stack, "200 more")


def test_prometheus_loaded_the_alert_rules_and_scrapes_every_service(compose_stack: ComposeStack):
    rules_file = yaml.safe_load((ROOT / "deploy" / "prometheus" / "srm-alerts.yml").read_text())
    wanted = {rule["alert"] for group in rules_file["groups"] for rule in group["rules"] if "alert" in rule}

    def loaded() -> set[str] | None:
        answer = get_json(compose_stack, "prometheus", "/api/v1/rules")
        return {r["name"] for g in answer["data"]["groups"] for r in g["rules"]} if answer else None

    rules = wait_for("Prometheus answering /api/v1/rules", loaded, 300, describe=compose_stack.describe)
    assert rules == wanted

    def scraped() -> dict[str, str] | None:
        answer = get_json(compose_stack, "prometheus", "/api/v1/targets")
        targets = answer["data"]["activeTargets"] if answer else []
        health = {target["labels"]["instance"]: target["health"] for target in targets}
        return health if health and set(health.values()) == {"up"} else None

    health = wait_for("every Prometheus target up", scraped, 300, every_s=5, describe=compose_stack.describe)
    assert set(health) == {"service-east:6670", "service-west:6670", "gateway:6670"}


def test_a_killed_aggregator_is_restarted_and_counts_nothing_twice(compose_stack: ComposeStack):
    before = compose_stack.state("aggregator-east")
    assert before["status"] == "running", before
    produce(compose_stack, "east", 100, "before-kill")  # in flight while the aggregator dies
    subprocess.run(["kill", "-9", str(before["pid"])], check=True)  # the container's main process

    def restarted() -> dict | None:
        now = compose_stack.state("aggregator-east")
        return now if now["status"] == "running" and now["started"] != before["started"] else None

    wait_for("aggregator-east restarted by its restart policy", restarted, 300,
             describe=compose_stack.describe)
    wait_for_counts(compose_stack, "100 produced as the aggregator was killed")
    produce(compose_stack, "east", 50, "after-kill")
    wait_for_counts(compose_stack, "50 after the restart")


def test_down_then_up_keeps_the_rollups(compose_stack: ComposeStack):
    compose_stack.down()
    with pytest.raises(subprocess.SubprocessError):
        compose_stack.container("aggregator-east")  # gone, with every other container
    compose_stack.up()
    for site in SOURCE_OF:  # what was counted before, before anything new is produced
        def answering(s: str = site) -> bool:
            return record_count(compose_stack, s) is not None
        wait_for(f"site {site} answering its record_count after up", answering, FIRST_ANSWER_S,
                 describe=compose_stack.describe)
        assert counts_every_record(compose_stack, site), (record_count(compose_stack, site), produced[site])
    for site in SOURCE_OF:
        produce(compose_stack, site, 70, "after-up")
    wait_for_counts(compose_stack, "70 after down and up")
