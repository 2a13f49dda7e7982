"""A cluster that refuses the aggregator's login is named once, retried with a doubling back-off.

Real secured brokers (SASL_PLAINTEXT, SCRAM-SHA-512) and the real Spark Kafka source: the query built
by the aggregator's own ``query_specs`` from a file with a wrong password for west.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path

import pytest

from aggregator.__main__ import query_specs
from aggregator.supervisor import QuerySupervisor
from contract.config import load_config
from stack import srm_properties
from stack.kafka_cluster import KafkaClusters
from stack.secured_listeners import client_properties

pytestmark = pytest.mark.integration

REFUSED = "west: SASL authentication failed (SCRAM-SHA-512): invalid credentials"
# The refused back-off's first wait (10 s in the product) at a quarter: waits of 2.5, 5 and 10 s.
FIRST_WAIT_S = 2.5
WATCHED_S = FIRST_WAIT_S * (1 + 2 + 4)  # from the first line: room for the three waits, four attempts


def test_wrong_password_is_one_error_then_backed_off_retries(secured_clusters: KafkaClusters, spark,
                                                              redis_url: str, tmp_path: Path, caplog):
    security = secured_clusters["west"].security
    assert security is not None
    wrong = f"wrong-{uuid.uuid4().hex}"
    extra: dict[str, object] = {f"west.{k}": v for k, v in
                                client_properties("sasl_plaintext", security, password=wrong).items()}
    extra["aggregator.checkpoint.dir"] = str(tmp_path / "checkpoints")
    path = srm_properties.write(tmp_path / "srm.properties",
                                {"east": secured_clusters.bootstrap("east"),
                                 "west": secured_clusters["west"].secured_bootstrap("sasl_plaintext")},
                                [("east", "west")], redis_url, extra)
    supervisor = QuerySupervisor(spark, query_specs(load_config(path)), backoff_s=1.0,
                                 refused_backoff_s=FIRST_WAIT_S)
    with caplog.at_level(logging.INFO, logger="aggregator.supervisor"):
        began = time.monotonic()
        supervisor.start_all()
        try:
            named_after = None
            # Up to 40 s for the first refusal, then WATCHED_S from it.
            while time.monotonic() - began < (40 if named_after is None else named_after + WATCHED_S):
                supervisor.check()
                if named_after is None and supervisor.rejected:
                    named_after = time.monotonic() - began
                time.sleep(0.5)
        finally:
            supervisor.stop_all()
    # Spark starts the query's Kafka consumer first: seconds on a busy machine, then the refusal at once.
    assert named_after is not None and named_after < 40, caplog.text
    assert supervisor.rejected == {"rollup_west": REFUSED}
    lines = [r for r in caplog.records if r.name == "aggregator.supervisor"]
    assert lines[0].levelname == "ERROR" and lines[0].getMessage().startswith(REFUSED)
    # Waits of 2.5, 5, 10 s: at most 4 attempts while watched, one line each (the 1 s restart back-off
    # alone would give ~18).
    assert 1 <= len(lines) <= 4, [r.getMessage() for r in lines]
    assert all(r.levelname == "WARNING" for r in lines[1:])
    assert wrong not in caplog.text and security.password not in caplog.text
