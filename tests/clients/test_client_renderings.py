"""Each cluster's Kafka client configuration out of the properties file: SRM's layering, the librdkafka
translation, key stores, and the start-up check a process makes of the renderings it uses."""

from __future__ import annotations

import logging

import confluent_kafka
import pytest

from clients.client_properties import LIBRDKAFKA_PROPERTIES
from clients.client_renderings import check_client_configs, kafka_client_config
from contract.config import ConfigError, parse_config
from tests.sample_properties import BASE, NAME, THREE, parse


def error_of(text: str) -> ConfigError:
    """The error a process building librdkafka clients meets at start-up (``clients.entry_point``)."""
    with pytest.raises(ConfigError) as caught:
        check_client_configs(parse_config(text, NAME))
    return caught.value


# -- Kafka client configuration -----------------------------------------------------------------

_PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_plain_cluster_gets_only_bootstrap_servers():
    config = parse()
    assert kafka_client_config(config, "west") == {"bootstrap.servers": "west-1:9092"}


def test_connection_properties_global_then_cluster():
    config = parse("security.protocol = SSL\nclient.id = srm\neast.security.protocol = SASL_SSL\n"
                   "east.sasl.mechanism = SCRAM-SHA-512\n")
    assert kafka_client_config(config, "east")["security.protocol"] == "SASL_SSL"
    assert kafka_client_config(config, "west") == {
        "bootstrap.servers": "west-1:9092",
        "security.protocol": "SSL",
        "client.id": "srm",
    }


def test_global_non_client_settings_do_not_leak_into_clients():
    config = parse("tasks.max = 3\nmetrics.period = 5\nbootstrap.servers = wrong:1\n")
    assert kafka_client_config(config, "east") == {"bootstrap.servers": "east-1:9092,east-2:9092"}


def test_role_prefix_applies_to_that_client_type_only():
    config = parse("consumer.fetch.min.bytes = 10\neast.producer.linger.ms = 5\n")
    assert kafka_client_config(config, "east", "consumer")["fetch.min.bytes"] == "10"
    assert "fetch.min.bytes" not in kafka_client_config(config, "east", "producer")
    assert kafka_client_config(config, "east", "producer")["linger.ms"] == "5"
    assert "linger.ms" not in kafka_client_config(config, "west", "producer")
    assert "linger.ms" not in kafka_client_config(config, "east", "admin")


def test_mm2_consumer_poll_timeout_is_not_a_client_property():
    config = parse("consumer.poll.timeout.ms = 500\n")
    assert kafka_client_config(config, "east", "consumer") == {"bootstrap.servers": "east-1:9092,east-2:9092"}
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
    assert kafka_client_config(config, "A", "consumer", "A", "B")["client.id"] == "source-consumer"
    assert kafka_client_config(config, "A", "admin", "A", "B")["client.id"] == "source-cluster"
    assert kafka_client_config(config, "B", "admin", "A", "B")["client.id"] == "target-cluster"
    assert kafka_client_config(config, "B", "producer", "A", "B")["client.id"] == "producer"
    assert kafka_client_config(config, "B", "consumer", "A", "B")["client.id"] == "consumer"


def test_replication_prefixes_do_not_apply_outside_the_replication():
    config = parse(SRM_PREFIXES, THREE)
    assert kafka_client_config(config, "A", "consumer")["client.id"] == "cluster"
    assert kafka_client_config(config, "A", "consumer", "A", "C")["client.id"] == "cluster"
    assert "client.id" not in kafka_client_config(config, "C", "producer", "A", "C")


def test_replication_level_beats_global_for_the_same_prefix():
    config = parse("source.consumer.fetch.min.bytes = 1\nA->B.source.consumer.fetch.min.bytes = 2\n", THREE)
    assert kafka_client_config(config, "A", "consumer", "A", "B")["fetch.min.bytes"] == "2"
    assert kafka_client_config(config, "A", "consumer", "A", "C")["fetch.min.bytes"] == "1"


def test_bootstrap_servers_always_come_from_the_cluster():
    config = parse("east.consumer.bootstrap.servers = elsewhere:1\n")
    assert kafka_client_config(config, "east", "consumer")["bootstrap.servers"] == "east-1:9092,east-2:9092"


def test_client_config_argument_checks():
    config = parse()
    with pytest.raises(ValueError, match="unknown cluster alias 'north'"):
        kafka_client_config(config, "north")
    with pytest.raises(ValueError, match="unknown client role 'streams'"):
        kafka_client_config(config, "east", "streams")
    with pytest.raises(ValueError, match="neither the source"):
        kafka_client_config(config, "east", "admin", "west", "west")


@pytest.mark.parametrize("module", [_PLAIN, _SCRAM])
def test_jaas_plain_and_scram_become_username_and_password(module):
    config = parse(
        "east.security.protocol = SASL_SSL\neast.sasl.mechanism = SCRAM-SHA-512\n"
        f'east.sasl.jaas.config = {module} required username="alice" password="p a;s\\\\\\"s";\n'
    )
    client = kafka_client_config(config, "east", "producer")
    assert client["sasl.username"] == "alice"
    assert client["sasl.password"] == 'p a;s"s'
    assert client["sasl.mechanism"] == "SCRAM-SHA-512"
    assert "sasl.jaas.config" not in client


def test_explicit_librdkafka_credentials_win_over_jaas():
    config = parse(
        f'east.sasl.jaas.config = {_PLAIN} required username="a" password="b";\neast.sasl.username = c\n'
    )
    assert kafka_client_config(config, "east")["sasl.username"] == "c"
    assert kafka_client_config(config, "east")["sasl.password"] == "b"


def test_jaas_kerberos_and_oauthbearer():
    config = parse(
        "east.sasl.jaas.config = com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        'keyTab="/etc/srm.keytab" principal="srm@EXAMPLE.COM";\n'
        "west.sasl.jaas.config = org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
        "required "
        'clientId="srm" clientSecret="s3cret" scope="kafka";\n'
        "west.sasl.oauthbearer.token.endpoint.url = https://idp/token\n"
    )
    east = kafka_client_config(config, "east")
    assert east["sasl.kerberos.keytab"] == "/etc/srm.keytab"
    assert east["sasl.kerberos.principal"] == "srm@EXAMPLE.COM"
    west = kafka_client_config(config, "west")
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
    # A JKS store is exported with keytool for librdkafka (tests/clients/test_java_client_properties.py):
    # a store that is not there fails at load, not at the first connection.
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
    assert kafka_client_config(config, "east")["ssl.ca.location"] == "/etc/ca.pem"
    west = kafka_client_config(config, "west")
    assert west["ssl.ca.location"] == "/etc/west-ca.pem"
    assert not any(key.startswith("ssl.truststore") for key in west)


def test_key_stores():
    config = parse(
        "east.ssl.keystore.type = PKCS12\neast.ssl.keystore.location = /etc/ks.p12\n"
        "east.ssl.keystore.password = pw\n"
        "west.ssl.keystore.type = PEM\nwest.ssl.keystore.location = /etc/client.pem\n"
        "west.ssl.key.password = kp\n"
    )
    east = kafka_client_config(config, "east")
    assert east["ssl.keystore.location"] == "/etc/ks.p12"
    assert east["ssl.keystore.password"] == "pw"
    west = kafka_client_config(config, "west")
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
    east = kafka_client_config(config, "east")
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
    consumer = kafka_client_config(config, "east", "consumer")
    assert consumer["ssl.endpoint.identification.algorithm"] == "none"
    assert consumer["auto.offset.reset"] == "error"
    assert consumer["partition.assignment.strategy"] == "range,cooperative-sticky"
    assert consumer["fetch.wait.max.ms"] == "250"
    assert consumer["socket.receive.buffer.bytes"] == "65536"
    producer = kafka_client_config(config, "east", "producer")
    assert producer["message.max.bytes"] == "10485760"
    assert producer["queue.buffering.max.kbytes"] == "32769"


def test_assignor_without_librdkafka_counterpart_falls_back_to_the_default():
    config = parse(
        "consumer.partition.assignment.strategy = org.apache.kafka.clients.consumer.StickyAssignor\n"
    )
    assert "partition.assignment.strategy" not in kafka_client_config(config, "east", "consumer")


def test_bad_buffer_memory_is_a_located_error():
    error = error_of(BASE + "producer.buffer.memory = lots\n")
    assert str(error) == f"{NAME}:4: producer.buffer.memory: expected a number of bytes"


def test_java_only_keys_are_dropped_with_one_warning_and_no_values(caplog):
    caplog.set_level(logging.WARNING, logger="clients.client_renderings")
    config = parse(
        "east.ssl.enabled.protocols = TLSv1.3\n"
        "east.consumer.key.deserializer = org.apache.kafka.common.serialization.ByteArrayDeserializer\n"
        "east.security.providers = com.example.SecretProvider\n"
    )
    client = kafka_client_config(config, "east", "consumer")
    assert client == {"bootstrap.servers": "east-1:9092,east-2:9092"}
    assert "srm.properties:4: east.ssl.enabled.protocols is a Java client property" in caplog.text
    assert "east.consumer.key.deserializer" in caplog.text
    assert "TLSv1.3" not in caplog.text
    assert "SecretProvider" not in caplog.text
    def warnings() -> int:  # this module's: a thread of an earlier test in this process may log meanwhile
        return sum(r.name == "clients.client_renderings" for r in caplog.records)

    said = warnings()
    kafka_client_config(config, "east", "consumer")
    assert warnings() == said


def test_translated_keys_are_all_librdkafka_properties():
    config = parse(
        f'east.sasl.jaas.config = {_SCRAM} required username="u" password="p";\n'
        "east.ssl.truststore.type = PEM\neast.ssl.truststore.location = /ca.pem\n"
        "east.ssl.keystore.location = /ks.p12\neast.producer.max.request.size = 1\n"
        "east.producer.buffer.memory = 1\neast.consumer.fetch.max.wait.ms = 1\neast.send.buffer.bytes = 1\n"
    )
    for role in ("admin", "consumer", "producer"):
        assert set(kafka_client_config(config, "east", role)) <= LIBRDKAFKA_PROPERTIES


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
        kafka_client_config(config, "east", role, "east", "west")
    assert "TOPSECRET" not in caplog.text


def test_client_errors_in_replication_prefixes_fail_at_load():
    error = error_of(
        BASE + "east->west.source.cluster.ssl.truststore.location = /x.jks\neast->west.enabled = true\n"
    )
    assert str(error).startswith(
        f"{NAME}:4: east->west.source.cluster.ssl.truststore.location: cannot read the store"
    )
