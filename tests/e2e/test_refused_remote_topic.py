"""The API shows a target's refusal to create a remote topic, and the recovery once it is granted.

The driver logs in to west (KRaft's StandardAuthorizer, `guarded_west`) as a SCRAM user that may run
the replication but not create `east.*` topics. The aggregator (Spark's Kafka source, the rollup query
srm-aggregator builds) and the service read west as its super user, as an operator's monitoring
principal would. `GET /v2/replications/east/west` says FAILED, naming the topic and the missing
permission; after CREATE is granted it is no longer FAILED and the topic's records are counted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AclOperation

from aggregator.__main__ import query_specs
from aggregator.query import start_rollup_query
from contract.config import load_config
from stack import srm_properties
from stack.kafka_cluster import KafkaCluster, free_port, wait_for_port
from stack.processes import ManagedProcess
from stack.secured_listeners import client_properties
from tests.e2e.http_polling import poll_json
from tests.guarded_target import PREFIXED, Grants, allow, replication_without_create
from tests.interop.support import create_topic, produce_values, running_driver, tag

pytestmark = pytest.mark.e2e

N = 40
REDIS_DB = 7  # this test's own database: other tests' east->west reports stay out of its answers



def test_api_reports_the_refused_remote_topic_then_the_recovery(
        kafka_clusters: dict[str, str], guarded_west: KafkaCluster, redis_url: str, spark,
        tmp_path: Path) -> None:
    east, west = kafka_clusters["east"], guarded_west.bootstrap_servers
    security = guarded_west.security
    assert security is not None
    principal = f"User:{security.user}"
    topic = f"refused-api-{tag()}"
    create_topic(east, topic, 1)
    produce_values(east, topic, 1, N)
    own_redis = f"{redis_url.rsplit('/', 1)[0]}/{REDIS_DB}"
    redis.Redis.from_url(own_redis).flushdb()
    port = free_port()
    monitoring = srm_properties.write(tmp_path / "monitoring.properties", {"east": east, "west": west},
                                      [("east", "west")], own_redis, {
                                          # stale after 3 periods: a report's age includes the
                                          # aggregator's micro-batch, 7.6 s at worst on a busy machine
                                          "metrics.period": 3, "service.port": port, "service.workers": 1,
                                          "aggregator.checkpoint.dir": str(tmp_path / "checkpoints"),
                                          "aggregator.trigger.interval.ms": 1000,
                                          "aggregator.watermark.delay.seconds": 60})
    login = client_properties("sasl_plaintext", security)
    driver_settings = {"topics": topic, "emit.checkpoints.enabled": "false",
                       **{f"west.{key}": value for key, value in login.items()}}
    driver_bootstraps = {"east": east, "west": guarded_west.secured_bootstrap("sasl_plaintext")}
    started_ms = int(time.time() * 1000) - 60_000
    url = f"http://127.0.0.1:{port}/v2/replications/east/west"
    refused = f"'east.{topic}'"
    service, query = None, None
    with Grants(west) as grants:
        grants.grant(replication_without_create(principal, "east"))
        try:
            service = ManagedProcess.python_module("service", "service", ["--config", str(monitoring)],
                                                   tmp_path).start()
            query = start_rollup_query(spark, query_specs(load_config(monitoring))[0])
            wait_for_port(port, 30, service.process)
            with running_driver(tmp_path, driver_bootstraps, [("east", "west")], driver_settings) as driver:
                # the aggregator's first micro-batch in a fresh session took over 90 s at load 20
                answer = poll_json(url, lambda a: a["state"] == "FAILED" and refused in a["explanation"], 240)
                assert answer is not None and answer["state"] == "FAILED", (answer, query.exception())
                explanation = answer["explanation"]
                assert refused in explanation and "TOPIC_AUTHORIZATION_FAILED" in explanation, explanation
                assert "CREATE" in explanation and security.password not in explanation, explanation

                grants.grant(allow(principal, PREFIXED, "east.", AclOperation.CREATE))
                counted = poll_json(f"http://127.0.0.1:{port}/v2/topic-metrics/east/west/{topic}/record_count"
                                    f"?from={started_ms}", lambda a: a.get("value") == N, 90)
                assert counted is not None and counted.get("value") == N, counted
                # the state this asserts, not merely "no longer FAILED": a report that arrives late
                # on a busy machine is a passing UNKNOWN (stale), which the next report ends
                answer = poll_json(url, lambda a: a["state"] in ("ACTIVE", "INACTIVE"), 90)
                assert answer is not None and answer["state"] in ("ACTIVE", "INACTIVE"), answer
                assert refused not in answer["explanation"], answer
                driver.assert_running()
        finally:
            if query is not None:
                query.stop()
            if service is not None:
                service.stop()
