"""The ACL recipe of docs/security.md for srm-control.internal, on a broker that enforces ACLs.

srm-control.internal is an admin channel: whoever may produce to it can stop a replication (deny
`.*`) or copy a topic `topics.exclude` keeps out. The recipe grants Write to the operator's principal
only, and Read + Describe to the drivers'. On `guarded_west` (KRaft's StandardAuthorizer) the
operator's `srm-control` edits the lists, the driver's principal is refused a write, and the driver
still reads the lists.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from contract.config import SrmConfig, load_config
from contract.replication_policy import CONTROL_TOPIC
from driver import control_cli
from driver.control_lists import ControlLists
from stack import srm_properties
from stack.kafka_cluster import KafkaCluster
from stack.secured_listeners import client_properties, scram_jaas
from tests.guarded_target import LITERAL, PREFIXED, Grants, allow

pytestmark = pytest.mark.integration

OPERATOR, OPERATOR_PASSWORD = "srm-operator", "operator-secret-1"


def recipe(operator: str, driver: str) -> list:
    """docs/security.md's kafka-acls commands, as bindings."""
    return [*allow(operator, LITERAL, CONTROL_TOPIC, AclOperation.WRITE, AclOperation.DESCRIBE,
                   AclOperation.READ),
            *allow(driver, LITERAL, CONTROL_TOPIC, AclOperation.READ, AclOperation.DESCRIBE)]


def config_as(path: Path, west: KafkaCluster, login: dict[str, str]) -> SrmConfig:
    bootstraps = {"east": "127.0.0.1:1", "west": west.secured_bootstrap("sasl_plaintext")}
    extra = {f"west.{key}": value for key, value in login.items()}
    return load_config(srm_properties.write(path, bootstraps, [("east", "west")], "redis://127.0.0.1:1/0",
                                            extra))


def ensure_control_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if CONTROL_TOPIC not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(CONTROL_TOPIC, 1, 1, config={"cleanup.policy": "compact"})])[
            CONTROL_TOPIC].result(30)


def test_only_the_operator_may_write_the_lists(guarded_west: KafkaCluster, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    security = guarded_west.security
    assert security is not None
    super_user = AdminClient({"bootstrap.servers": guarded_west.bootstrap_servers})
    super_user.alter_user_scram_credentials([UserScramCredentialUpsertion(
        OPERATOR, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), OPERATOR_PASSWORD.encode())]
    )[OPERATOR].result(30)
    ensure_control_topic(guarded_west.bootstrap_servers)
    driver_login = client_properties("sasl_plaintext", security)
    operator_login = {**driver_login, "sasl.jaas.config": scram_jaas(OPERATOR, OPERATOR_PASSWORD)}
    operator_file = tmp_path / "operator.properties"
    config_as(operator_file, guarded_west, operator_login)
    driver_file = tmp_path / "driver.properties"
    driver_config = config_as(driver_file, guarded_west, driver_login)
    denied, forged = f"recipe-{uuid.uuid4().hex[:8]}", f"forged-{uuid.uuid4().hex[:8]}"
    edit = ["topics", "--source", "east", "--target", "west", "--timeout", "30"]
    with Grants(guarded_west.bootstrap_servers) as grants:
        grants.grant(recipe(f"User:{OPERATOR}", f"User:{security.user}"))
        capsys.readouterr()
        assert control_cli.main([*edit, "--config", str(operator_file), "--add-blacklist", denied]) == 0
        for wider_grant in ([], allow(f"User:{security.user}", PREFIXED, "srm-metrics.", AclOperation.WRITE)):
            if wider_grant:  # with and without Write on another topic (what drivers have)
                grants.grant(wider_grant)
            assert control_cli.main([*edit, "--config", str(driver_file), "--add", forged]) == 2
            refused = capsys.readouterr().err
            assert refused.count("\n") == 1 and "topic authorization failed" in refused.lower(), refused

        lists = ControlLists(driver_config, "west").start()
        try:
            assert lists.wait_until_loaded(60), lists.failure
            allow_list, deny_list = lists.topic_lists("east", "west")
        finally:
            lists.stop()
    assert denied in deny_list and forged not in allow_list
