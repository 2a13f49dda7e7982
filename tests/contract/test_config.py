"""The SRM-style properties file: hierarchy, replications, client configs and located errors."""

from __future__ import annotations

import logging

import confluent_kafka
import pytest

from contract.client_properties import LIBRDKAFKA_PROPERTIES
from contract.config import ClusterSettings, ConfigError, Replication, load_config, parse_config
from contract.replication_policy import DefaultReplicationPolicy, IdentityReplicationPolicy

BASE = """\
clusters = east, west
east.bootstrap.servers = east-1:9092,east-2:9092
west.bootstrap.servers = west-1:9092
"""
THREE = """\
clusters = A, B, C
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
C.bootstrap.servers = c:9092
"""
NAME = "srm.properties"


def parse(extra: str = "", base: str = BASE):
    return parse_config(base + extra, NAME)


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, NAME)
    return caught.value


# -- clusters and target lists ------------------------------------------------------------------


def test_clusters_and_bootstrap_servers():
    config = parse()
    assert list(config.clusters) == ["east", "west"]
    assert config.clusters["east"] == ClusterSettings("east", "east-1:9092,east-2:9092", {})
    assert config.path == NAME


def test_target_lists_default_to_all_clusters():
    config = parse()
    assert config.driver_target_clusters == ["east", "west"]
    assert config.service_target_clusters == ["east", "west"]
    assert config.service_remote_clusters == []


def test_service_targets_default_to_driver_targets():
    config = parse("driver.target.clusters = west\n")
    assert config.driver_target_clusters == ["west"]
    assert config.service_target_clusters == ["west"]
    assert parse("service.target.clusters = east\n").service_target_clusters == ["east"]


def test_remote_clusters_are_not_driver_targets_by_default():
    config = parse("service.remote.clusters = west\n")
    assert config.service_remote_clusters == ["west"]
    assert config.driver_target_clusters == ["east"]
    assert parse(
        "service.remote.clusters = west\ndriver.target.clusters = east, west\n"
    ).driver_target_clusters == [
        "east",
        "west",
    ]


def test_cluster_settings_do_not_show_credentials():
    config = parse("east.sasl.username = srm\neast.sasl.password = hunter2\n")
    assert "hunter2" not in repr(config.clusters["east"])
    assert "hunter2" not in repr(config)
    assert config.clusters["east"].client_properties["sasl.password"] == "hunter2"


# -- the hierarchy ------------------------------------------------------------------------------

LEVELS = [
    ("A->B.tasks.max", "1"),
    ("B.tasks.max", "2"),
    ("A.tasks.max", "3"),
    ("connectors.tasks.max", "4"),
    ("workers.tasks.max", "5"),
    ("tasks.max", "6"),
]


@pytest.mark.parametrize("most_specific", range(len(LEVELS)))
def test_most_specific_level_wins(most_specific):
    present = LEVELS[most_specific:]
    config = parse("".join(f"{key} = {value}\n" for key, value in reversed(present)), THREE)
    assert config.get("tasks.max", "A", "B") == present[0][1]
    assert config.get_int("tasks.max", "A", "B") == int(present[0][1])


def test_target_alias_wins_over_source_alias():
    config = parse(
        "A.emit.checkpoints.interval.seconds = 10\nB.emit.checkpoints.interval.seconds = 20\n", THREE
    )
    assert config.get_float("emit.checkpoints.interval.seconds", "A", "B") == 20.0
    assert config.get_float("emit.checkpoints.interval.seconds", "B", "A") == 10.0
    assert config.get_float("emit.checkpoints.interval.seconds", "A", "C") == 10.0


def test_lookups_with_one_alias_or_none():
    config = parse("A.tasks.max = 3\ntasks.max = 6\nA->B.tasks.max = 1\n", THREE)
    assert config.get("tasks.max", source="A") == "3"
    assert config.get("tasks.max", target="A") == "3"
    assert config.get("tasks.max", target="B") == "6"
    assert config.get("tasks.max") == "6"


def test_missing_keys_give_the_default():
    config = parse()
    assert config.get("nothing") is None
    assert config.get("nothing", default="x") == "x"
    assert config.get_int("nothing", default=7) == 7
    assert config.get_bool("nothing", "east", "west", default=True) is True
    assert config.get_list("nothing") == []
    assert config.get_list("nothing", default=["a"]) == ["a"]


def test_values_are_trimmed_and_typed():
    config = parse("flag = TRUE \nratio = 0.25\ncount = -3\nnames = a , b,, c ,\nempty =\n")
    assert config.get("flag") == "TRUE"
    assert config.get_bool("flag") is True
    assert config.get_float("ratio") == 0.25
    assert config.get_int("count") == -3
    assert config.get_list("names") == ["a", "b", "c"]
    assert config.get_list("empty", default=["x"]) == []


def test_continuation_lines_and_escapes_are_parsed_like_java():
    config = parse("long = one, \\\n    two\nunicode = caf\\u00e9\nsep : colon\n")
    assert config.get_list("long") == ["one", "two"]
    assert config.get("unicode") == "café"
    assert config.get("sep") == "colon"


@pytest.mark.parametrize(
    ("getter", "value", "expected"),
    [
        ("get_int", "1.5", "an integer"),
        ("get_float", "fast", "a number"),
        ("get_bool", "yes", "true or false"),
    ],
)
def test_bad_typed_value_names_file_line_and_key(getter, value, expected):
    config = parse(f"# comment\nservice.thing = {value}\n")
    with pytest.raises(ConfigError) as caught:
        getattr(config, getter)("service.thing")
    assert str(caught.value) == f"{NAME}:5: service.thing: expected {expected}, got '{value}'"
    assert caught.value.line == 5
    assert caught.value.key == "service.thing"


@pytest.mark.parametrize("line", [
    "sync.topic.acls.interval.seconds = 0",
    "east->west.sync.topic.acls.interval.seconds = -5",
    "west.refresh.groups.interval.seconds = 0",
    "workers.metrics.period = 0",
    "aggregator.trigger.interval.ms = 0",
    "service.advertisement.interval.seconds = -1",
])
def test_every_interval_setting_must_be_positive_when_the_file_loads(line):
    key, value = line.split(" = ")
    error = error_of(BASE + f"# intervals\n{line}\n")
    assert (error.line, error.key) == (5, key)
    assert str(error).startswith(f"{NAME}:5: {key}: must be greater than 0, got '{value}'")


def test_the_positive_rule_is_one_rule_of_the_settings_table():
    from contract.settings import SETTINGS

    intervals = {key for key, setting in SETTINGS.items() if setting.positive}
    assert {"sync.topic.acls.interval.seconds", "refresh.topics.interval.seconds", "metrics.period",
            "emit.heartbeats.interval.seconds", "aggregator.trigger.interval.ms"} <= intervals
    assert "offset.lag.max" not in intervals and "service.remote.timeout.ms" not in intervals
    config = parse("sync.topic.acls.interval.seconds = 0.5\n")
    assert config.setting("sync.topic.acls.interval.seconds") == 0.5


def test_bad_secret_value_is_not_shown():
    config = parse("east.ssl.key.password = not-a-number\n")
    with pytest.raises(ConfigError) as caught:
        config.get_int("ssl.key.password", source="east")
    assert "not-a-number" not in str(caught.value)
    assert "redacted" in str(caught.value)


def test_config_error_points_at_the_entry_get_would_use():
    config = parse("topics = a\nA->B.topics = b\n", THREE)
    error = config.config_error("topics", "bad pattern", "A", "B")
    assert str(error) == f"{NAME}:6: A->B.topics: bad pattern"
    assert str(config.config_error("absent", "needed")) == f"{NAME}: absent: needed"


def test_line_numbers_count_comments_blank_lines_continuations_and_crlf():
    text = (
        "! header\r\n\r\nclusters = a, \\\r\n  b\r\n"
        "a.bootstrap.servers = x\rb.bootstrap.servers = y\nbad = z\n"
    )
    config = parse_config(text, NAME)
    assert config.line_of("clusters") == 3
    assert config.line_of("a.bootstrap.servers") == 5
    assert config.line_of("b.bootstrap.servers") == 6
    assert config.line_of("bad") == 7


def test_repeated_key_last_wins_with_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="contract.config")
    config = parse("tasks.max = 1\ntasks.max = 2\n")
    assert config.get_int("tasks.max") == 2
    assert config.line_of("tasks.max") == 5
    assert "srm.properties:5: tasks.max repeats line 4" in caplog.text


# -- replications -------------------------------------------------------------------------------


def test_every_pair_emits_heartbeats_but_none_is_enabled_by_default():
    config = parse("", THREE)
    pairs = {(r.source, r.target): r for r in config.replications()}
    assert len(pairs) == 6
    assert all(not r.enabled and r.emit_heartbeats for r in pairs.values())


def test_enabled_replication():
    config = parse("A->B.enabled = true\n", THREE)
    pairs = {r.name: r for r in config.replications()}
    assert pairs["A->B"] == Replication("A", "B", enabled=True, emit_heartbeats=True)
    assert not pairs["B->A"].enabled


def test_disabled_pair_without_heartbeats_is_omitted():
    config = parse("A->B.enabled = true\nemit.heartbeats.enabled = false\n", THREE)
    assert config.replications() == [Replication("A", "B", enabled=True, emit_heartbeats=False)]


def test_heartbeats_switch_follows_the_hierarchy():
    config = parse("emit.heartbeats.enabled = false\nC->A.emit.heartbeats.enabled = true\n", THREE)
    assert [r.name for r in config.replications()] == ["C->A"]


def test_only_pairs_into_driver_targets():
    config = parse("driver.target.clusters = B\nA->B.enabled = true\nB->A.enabled = true\n", THREE)
    assert sorted(r.name for r in config.replications()) == ["A->B", "C->B"]


def test_replication_policy_from_the_hierarchy():
    config = parse(
        "replication.policy.separator = _\n"
        "A->B.replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n",
        THREE,
    )
    identity = config.replication_policy("A", "B")
    assert isinstance(identity, IdentityReplicationPolicy)
    assert identity.topic_source("orders") == "A"
    default = config.replication_policy("B", "C")
    assert type(default) is DefaultReplicationPolicy
    assert default.format_remote_topic("B", "t") == "B_t"


def test_internal_topic_separator_switch_reaches_the_policy():
    config = parse(
        "replication.policy.separator = _\nreplication.policy.internal.topic.separator.enabled = false\n"
    )
    assert config.replication_policy("east", "west").checkpoints_topic("east") == "east.checkpoints.internal"


# -- Kafka client configuration -----------------------------------------------------------------

_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_plain_cluster_gets_only_bootstrap_servers():
    config = parse()
    assert config.kafka_client_config("west") == {"bootstrap.servers": "west-1:9092"}


def test_connection_properties_global_then_cluster():
    config = parse("security.protocol = SSL\nclient.id = srm\neast.security.protocol = SASL_SSL\n"
                   "east.sasl.mechanism = SCRAM-SHA-512\n")
    assert config.kafka_client_config("east")["security.protocol"] == "SASL_SSL"
    assert config.kafka_client_config("west") == {
        "bootstrap.servers": "west-1:9092",
        "security.protocol": "SSL",
        "client.id": "srm",
    }


def test_global_non_client_settings_do_not_leak_into_clients():
    config = parse("tasks.max = 3\nmetrics.period = 5\nbootstrap.servers = wrong:1\n")
    assert config.kafka_client_config("east") == {"bootstrap.servers": "east-1:9092,east-2:9092"}


def test_role_prefix_applies_to_that_client_type_only():
    config = parse("consumer.fetch.min.bytes = 10\neast.producer.linger.ms = 5\n")
    assert config.kafka_client_config("east", "consumer")["fetch.min.bytes"] == "10"
    assert "fetch.min.bytes" not in config.kafka_client_config("east", "producer")
    assert config.kafka_client_config("east", "producer")["linger.ms"] == "5"
    assert "linger.ms" not in config.kafka_client_config("west", "producer")
    assert "linger.ms" not in config.kafka_client_config("east", "admin")


def test_mm2_consumer_poll_timeout_is_not_a_client_property():
    config = parse("consumer.poll.timeout.ms = 500\n")
    assert config.kafka_client_config("east", "consumer") == {"bootstrap.servers": "east-1:9092,east-2:9092"}
    assert config.get_int("consumer.poll.timeout.ms") == 500


SRM_PREFIXES = """\
A.client.id = cluster
A->B.source.cluster.client.id = source-cluster
A->B.consumer.client.id = consumer
A->B.source.consumer.client.id = source-consumer
A->B.target.cluster.client.id = target-cluster
A->B.producer.client.id = producer
"""


def test_srm_client_prefixes_inside_a_replication():
    config = parse(SRM_PREFIXES, THREE)
    assert config.kafka_client_config("A", "consumer", "A", "B")["client.id"] == "source-consumer"
    assert config.kafka_client_config("A", "admin", "A", "B")["client.id"] == "source-cluster"
    assert config.kafka_client_config("B", "admin", "A", "B")["client.id"] == "target-cluster"
    assert config.kafka_client_config("B", "producer", "A", "B")["client.id"] == "producer"
    assert config.kafka_client_config("B", "consumer", "A", "B")["client.id"] == "consumer"


def test_replication_prefixes_do_not_apply_outside_the_replication():
    config = parse(SRM_PREFIXES, THREE)
    assert config.kafka_client_config("A", "consumer")["client.id"] == "cluster"
    assert config.kafka_client_config("A", "consumer", "A", "C")["client.id"] == "cluster"
    assert "client.id" not in config.kafka_client_config("C", "producer", "A", "C")


def test_replication_level_beats_global_for_the_same_prefix():
    config = parse("source.consumer.fetch.min.bytes = 1\nA->B.source.consumer.fetch.min.bytes = 2\n", THREE)
    assert config.kafka_client_config("A", "consumer", "A", "B")["fetch.min.bytes"] == "2"
    assert config.kafka_client_config("A", "consumer", "A", "C")["fetch.min.bytes"] == "1"


def test_bootstrap_servers_always_come_from_the_cluster():
    config = parse("east.consumer.bootstrap.servers = elsewhere:1\n")
    assert config.kafka_client_config("east", "consumer")["bootstrap.servers"] == "east-1:9092,east-2:9092"


def test_client_config_argument_checks():
    config = parse()
    with pytest.raises(ValueError, match="unknown cluster alias 'north'"):
        config.kafka_client_config("north")
    with pytest.raises(ValueError, match="unknown client role 'streams'"):
        config.kafka_client_config("east", "streams")
    with pytest.raises(ValueError, match="neither the source"):
        config.kafka_client_config("east", "admin", "west", "west")


@pytest.mark.parametrize("module", [_PLAIN, _SCRAM])
def test_jaas_plain_and_scram_become_username_and_password(module):
    config = parse(
        "east.security.protocol = SASL_SSL\neast.sasl.mechanism = SCRAM-SHA-512\n"
        f'east.sasl.jaas.config = {module} required username="alice" password="p a;s\\\\\\"s";\n'
    )
    client = config.kafka_client_config("east", "producer")
    assert client["sasl.username"] == "alice"
    assert client["sasl.password"] == 'p a;s"s'
    assert client["sasl.mechanism"] == "SCRAM-SHA-512"
    assert "sasl.jaas.config" not in client


def test_explicit_librdkafka_credentials_win_over_jaas():
    config = parse(
        f'east.sasl.jaas.config = {_PLAIN} required username="a" password="b";\neast.sasl.username = c\n'
    )
    assert config.kafka_client_config("east")["sasl.username"] == "c"
    assert config.kafka_client_config("east")["sasl.password"] == "b"


def test_jaas_kerberos_and_oauthbearer():
    config = parse(
        "east.sasl.jaas.config = com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        'keyTab="/etc/srm.keytab" principal="srm@EXAMPLE.COM";\n'
        "west.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        "required "
        'clientId="srm" clientSecret="s3cret" scope="kafka";\n'
        "west.sasl.oauthbearer.token.endpoint.url = https://idp/token\n"
    )
    east = config.kafka_client_config("east")
    assert east["sasl.kerberos.keytab"] == "/etc/srm.keytab"
    assert east["sasl.kerberos.principal"] == "srm@EXAMPLE.COM"
    west = config.kafka_client_config("west")
    assert west["sasl.oauthbearer.method"] == "oidc"
    assert west["sasl.oauthbearer.client.id"] == "srm"
    assert west["sasl.oauthbearer.client.secret"] == "s3cret"
    assert west["sasl.oauthbearer.scope"] == "kafka"
    assert west["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"


@pytest.mark.parametrize(
    ("jaas", "reason"),
    [
        (
            "com.example.CustomLoginModule required;",
            "com.example.CustomLoginModule has no librdkafka equivalent",
        ),
        (f'{_PLAIN} required username="alice";', "has no password option"),
        ("not a jaas entry", "not a '<LoginModule> required"),
        (f'{_PLAIN} required username="a" password="b"; {_PLAIN} required;', "only one login module"),
        (f'{_PLAIN} required username="unterminated', "cannot parse the options"),
    ],
)
def test_unusable_jaas_is_a_located_error_without_secrets(jaas, reason):
    error = error_of(BASE + "\neast.sasl.jaas.config = " + jaas + "\n")
    assert str(error).startswith(f"{NAME}:5: east.sasl.jaas.config: ")
    assert reason in str(error)
    assert "alice" not in str(error)


def test_missing_jks_trust_store_is_a_located_error():
    # A JKS store is exported with keytool for librdkafka (tests/contract/test_java_stores.py): a store
    # that is not there fails at load, not at the first connection.
    error = error_of(BASE + "east.ssl.truststore.location = /etc/kafka/truststore.jks\n")
    assert str(error) == (f"{NAME}:4: east.ssl.truststore.location: cannot read the store: "
                          "No such file or directory")


def test_missing_pkcs12_trust_store_is_located_too():
    error = error_of(BASE + "ssl.truststore.type = PKCS12\nssl.truststore.location = /etc/ts.p12\n")
    assert "cannot read the store" in str(error)
    assert error.key == "ssl.truststore.location"
    assert error.line == 5


def test_pem_trust_store_and_explicit_ca_location():
    config = parse(
        "east.ssl.truststore.type = PEM\neast.ssl.truststore.location = /etc/ca.pem\n"
        "west.ssl.truststore.location = /etc/ts.jks\nwest.ssl.ca.location = /etc/west-ca.pem\n"
        "west.ssl.truststore.password = changeit\n"
    )
    assert config.kafka_client_config("east")["ssl.ca.location"] == "/etc/ca.pem"
    west = config.kafka_client_config("west")
    assert west["ssl.ca.location"] == "/etc/west-ca.pem"
    assert not any(key.startswith("ssl.truststore") for key in west)


def test_key_stores():
    config = parse(
        "east.ssl.keystore.type = PKCS12\neast.ssl.keystore.location = /etc/ks.p12\n"
        "east.ssl.keystore.password = pw\n"
        "west.ssl.keystore.type = PEM\nwest.ssl.keystore.location = /etc/client.pem\n"
        "west.ssl.key.password = kp\n"
    )
    east = config.kafka_client_config("east")
    assert east["ssl.keystore.location"] == "/etc/ks.p12"
    assert east["ssl.keystore.password"] == "pw"
    west = config.kafka_client_config("west")
    assert west["ssl.certificate.location"] == west["ssl.key.location"] == "/etc/client.pem"
    assert west["ssl.key.password"] == "kp"
    assert "ssl.keystore.location" not in west


def test_missing_jks_key_store_is_a_located_error_without_its_password():
    error = error_of(
        BASE + "east.ssl.keystore.location = /etc/ks.jks\neast.ssl.keystore.password = hunter2\n"
    )
    assert str(error).startswith(f"{NAME}:4: east.ssl.keystore.location: cannot read the store")
    assert "hunter2" not in str(error)
    declared = error_of(BASE + "east.ssl.keystore.type = JKS\neast.ssl.keystore.location = /etc/ks.p12\n")
    assert "needs ssl.keystore.password" in str(declared)


def test_inline_pem_stores():
    config = parse(
        "east.ssl.truststore.certificates = CA-PEM\neast.ssl.keystore.certificate.chain = CHAIN\n"
        "east.ssl.keystore.key = KEY\n"
    )
    east = config.kafka_client_config("east")
    assert (east["ssl.ca.pem"], east["ssl.certificate.pem"], east["ssl.key.pem"]) == (
        "CA-PEM",
        "CHAIN",
        "KEY",
    )


def test_java_values_and_names_are_translated():
    config = parse(
        "east.ssl.endpoint.identification.algorithm =\n"
        "east.consumer.auto.offset.reset = none\n"
        "east.consumer.partition.assignment.strategy = org.apache.kafka.clients.consumer.RangeAssignor, "
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor\n"
        "east.consumer.fetch.max.wait.ms = 250\n"
        "east.producer.max.request.size = 10485760\n"
        "east.producer.buffer.memory = 33554433\n"
        "east.receive.buffer.bytes = 65536\n"
    )
    consumer = config.kafka_client_config("east", "consumer")
    assert consumer["ssl.endpoint.identification.algorithm"] == "none"
    assert consumer["auto.offset.reset"] == "error"
    assert consumer["partition.assignment.strategy"] == "range,cooperative-sticky"
    assert consumer["fetch.wait.max.ms"] == "250"
    assert consumer["socket.receive.buffer.bytes"] == "65536"
    producer = config.kafka_client_config("east", "producer")
    assert producer["message.max.bytes"] == "10485760"
    assert producer["queue.buffering.max.kbytes"] == "32769"


def test_assignor_without_librdkafka_counterpart_falls_back_to_the_default():
    config = parse(
        "consumer.partition.assignment.strategy = org.apache.kafka.clients.consumer.StickyAssignor\n"
    )
    assert "partition.assignment.strategy" not in config.kafka_client_config("east", "consumer")


def test_bad_buffer_memory_is_a_located_error():
    error = error_of(BASE + "producer.buffer.memory = lots\n")
    assert str(error) == f"{NAME}:4: producer.buffer.memory: expected a number of bytes"


def test_java_only_keys_are_dropped_with_one_warning_and_no_values(caplog):
    caplog.set_level(logging.WARNING, logger="contract.config")
    config = parse(
        "east.ssl.enabled.protocols = TLSv1.3\n"
        "east.consumer.key.deserializer = org.apache.kafka.common.serialization.ByteArrayDeserializer\n"
        "east.security.providers = com.example.SecretProvider\n"
    )
    client = config.kafka_client_config("east", "consumer")
    assert client == {"bootstrap.servers": "east-1:9092,east-2:9092"}
    assert "srm.properties:4: east.ssl.enabled.protocols is a Java client property" in caplog.text
    assert "east.consumer.key.deserializer" in caplog.text
    assert "TLSv1.3" not in caplog.text
    assert "SecretProvider" not in caplog.text
    warnings = len(caplog.records)
    config.kafka_client_config("east", "consumer")
    assert len(caplog.records) == warnings


def test_translated_keys_are_all_librdkafka_properties():
    config = parse(
        f'east.sasl.jaas.config = {_SCRAM} required username="u" password="p";\n'
        "east.ssl.truststore.type = PEM\neast.ssl.truststore.location = /ca.pem\n"
        "east.ssl.keystore.location = /ks.p12\neast.producer.max.request.size = 1\n"
        "east.producer.buffer.memory = 1\neast.consumer.fetch.max.wait.ms = 1\neast.send.buffer.bytes = 1\n"
    )
    for role in ("admin", "consumer", "producer"):
        assert set(config.kafka_client_config("east", role)) <= LIBRDKAFKA_PROPERTIES


def test_installed_librdkafka_knows_every_pass_through_property():
    unknown = []
    for name in sorted(LIBRDKAFKA_PROPERTIES):
        try:
            # No bootstrap.servers: a client that does get created never connects anywhere.
            confluent_kafka.Producer({name: "not-a-valid-value", "log_level": 0})
        except TypeError:
            pass  # confluent-kafka itself type-checks some properties it knows
        except confluent_kafka.KafkaException as exc:
            if "No such configuration property" in str(exc):
                unknown.append(name)
    assert unknown == []


def test_secrets_never_reach_the_log(caplog):
    caplog.set_level(logging.DEBUG)
    config = parse(
        f'east.sasl.jaas.config = {_PLAIN} required username="u" password="TOPSECRET";\n'
        "east.ssl.key.password = TOPSECRET\neast.ssl.keystore.password = TOPSECRET\n"
        "east.ssl.keystore.location = /x.p12\nsasl.password = TOPSECRET\nsasl.password = TOPSECRET\n"
    )
    for role in ("admin", "consumer", "producer"):
        config.kafka_client_config("east", role, "east", "west")
    assert "TOPSECRET" not in caplog.text


# -- located errors at load time ----------------------------------------------------------------


def test_unreadable_file_names_the_file(tmp_path):
    missing = tmp_path / "absent.properties"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value).startswith(f"{missing}: cannot read")


def test_load_config_reads_a_file(tmp_path):
    path = tmp_path / "srm.properties"
    path.write_text(BASE + "A.note = ok\n", encoding="utf-8")
    config = load_config(path)
    assert config.path == str(path)
    assert config.get("A.note") == "ok"


def test_load_config_accepts_latin1_files_like_java(tmp_path):
    path = tmp_path / "srm.properties"
    path.write_bytes((BASE + "owner = Jos\xe9\n").encode("latin-1"))
    assert load_config(path).get("owner") == "José"


def test_errors_of_a_loaded_file_name_its_path(tmp_path):
    path = tmp_path / "srm.properties"
    path.write_text(BASE + "east->west.enabled = maybe\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}:4: east->west.enabled: expected true or false, got 'maybe'"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("east.bootstrap.servers = x\n", f"{NAME}: clusters: missing; list the cluster aliases"),
        ("clusters = , \n", f"{NAME}:1: clusters: lists no cluster alias"),
        ("clusters = a, a\na.bootstrap.servers = x\n", f"{NAME}:1: clusters: lists an alias twice"),
        ("clusters = a b\n", f"{NAME}:1: clusters: alias 'a b' may only contain"),
        ("clusters = workers\n", f"{NAME}:1: clusters: alias 'workers' is a reserved prefix"),
        (
            "clusters = us.west\n",
            f"{NAME}:1: clusters: alias 'us.west' contains the replication separator '.'",
        ),
        (
            "# c\nclusters = a, b\na.bootstrap.servers = x\n",
            f"{NAME}:2: b.bootstrap.servers: missing or empty",
        ),
        ("clusters = a\na.bootstrap.servers =\n", f"{NAME}:2: a.bootstrap.servers: missing or empty"),
    ],
)
def test_cluster_list_errors(text, expected):
    assert str(error_of(text)).startswith(expected)


def test_dotted_alias_is_fine_with_another_separator():
    config = parse_config(
        "clusters = us.west\nreplication.policy.separator = _\nus.west.bootstrap.servers = x\n", NAME
    )
    assert list(config.clusters) == ["us.west"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("north->east.enabled = true\n", "4: north->east.enabled: source alias 'north' is not listed"),
        ("east->north.enabled = true\n", "4: east->north.enabled: target alias 'north' is not listed"),
        ("east->east.enabled = true\n", "4: east->east.enabled: source and target are the same cluster"),
        (
            "driver.target.clusters = east, north\n",
            "4: driver.target.clusters: 'north' not listed in 'clusters'",
        ),
        ("service.target.clusters = south\n", "4: service.target.clusters: 'south' not listed"),
        ("service.remote.clusters = far\n", "4: service.remote.clusters: 'far' not listed"),
    ],
)
def test_unknown_aliases_are_located_errors(extra, expected):
    assert str(error_of(BASE + extra)).startswith(f"{NAME}:{expected}")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("east->west.enabled = yes\n", "east->west.enabled: expected true or false, got 'yes'"),
        ("emit.heartbeats.enabled = 1\n", "emit.heartbeats.enabled: expected true or false, got '1'"),
        ("west.exactly.once = on\n", "west.exactly.once: expected true or false, got 'on'"),
        ("tasks.max = four\n", "tasks.max: expected an integer, got 'four'"),
        ("connectors.offset.lag.max = 1e3\n", "connectors.offset.lag.max: expected an integer, got '1e3'"),
        ("east->west.metrics.period = soon\n", "east->west.metrics.period: expected a number, got 'soon'"),
        (
            "workers.refresh.topics.interval.seconds = nan\n",
            "workers.refresh.topics.interval.seconds: expected",
        ),
    ],
)
def test_bad_known_values_fail_at_load_with_file_line_and_key(extra, expected):
    assert str(error_of(BASE + extra)).startswith(f"{NAME}:4: {expected}")


def test_fractional_intervals_are_accepted():
    config = parse("metrics.period = 2.5\nemit.heartbeats.interval.seconds = 0.5\n")
    assert config.get_float("metrics.period") == 2.5


def test_bad_policy_settings_fail_at_load():
    error = error_of(BASE + "east->west.replication.policy.class = com.example.Policy\n")
    assert str(error).startswith(f"{NAME}:4: east->west.replication.policy.class: unknown replication policy")
    assert "'com.example.Policy'" in str(error)
    assert str(error_of(BASE + "replication.policy.separator =\n")).startswith(
        f"{NAME}:4: replication.policy.separator: replication.policy.separator must not be empty"
    )


def test_invalid_unicode_escape_is_located():
    error = error_of(BASE + "ok = 1\nbad = \\u12G4\n")
    assert str(error).startswith(f"{NAME}:5: invalid \\u escape")


def test_client_errors_in_replication_prefixes_fail_at_load():
    error = error_of(
        BASE + "east->west.source.cluster.ssl.truststore.location = /x.jks\neast->west.enabled = true\n"
    )
    assert str(error).startswith(
        f"{NAME}:4: east->west.source.cluster.ssl.truststore.location: cannot read the store"
    )
