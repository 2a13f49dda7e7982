"""Which source topic ACLs reach the target, and how they change on the way (MM2 4.3.1's rules)."""

from __future__ import annotations

import functools

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from contract.replication_policy import DefaultReplicationPolicy
from driver.acl_sync import should_replicate_acl, target_bindings
from driver.topic_filter import TopicFilter, should_replicate_topic

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
POLICY = DefaultReplicationPolicy()


def topic_acl(name: str, operation: AclOperation, permission: AclPermissionType = ALLOW,
              pattern: ResourcePatternType = LITERAL, principal: str = "User:alice",
              host: str = "*") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, host, operation, permission)


def synced(bindings: list[AclBinding], topics: tuple[str, ...] = (".*",),
           heartbeats: bool = True) -> set[tuple[str, str, str, str, str]]:
    eligible = functools.partial(should_replicate_topic, topic_filter=TopicFilter(topics), policy=POLICY,
                                 target_alias="west", heartbeats_replication=heartbeats)
    result = target_bindings(bindings, eligible, functools.partial(POLICY.format_remote_topic, "east"))
    assert all(b.resource_pattern_type == LITERAL and b.restype == ResourceType.TOPIC for b in result)
    # The stubs type these fields as given (enum, str or int); a binding holds them as enums.
    return {(b.name, b.principal, b.host, AclOperation(b.operation).name,
             AclPermissionType(b.permission_type).name) for b in result}


def test_allow_all_becomes_read_and_allow_write_is_dropped() -> None:
    bindings = [topic_acl("orders", AclOperation.ALL), topic_acl("orders", AclOperation.WRITE),
                topic_acl("orders", AclOperation.DESCRIBE, host="10.0.0.1")]
    assert synced(bindings) == {("east.orders", "User:alice", "*", "READ", "ALLOW"),
                                ("east.orders", "User:alice", "10.0.0.1", "DESCRIBE", "ALLOW")}


def test_deny_bindings_are_copied_as_mm2_does() -> None:
    # MM2 4.3.1 filters only ALLOW WRITE; DENY ALL stays ALL (only ALLOW ALL is downgraded).
    bindings = [topic_acl("orders", AclOperation.READ, DENY), topic_acl("orders", AclOperation.ALL, DENY),
                topic_acl("orders", AclOperation.WRITE, DENY)]
    expected = {("east.orders", "User:alice", "*", op, "DENY") for op in ("READ", "ALL", "WRITE")}
    assert synced(bindings) == expected
    assert should_replicate_acl(topic_acl("t", AclOperation.WRITE, DENY))
    assert not should_replicate_acl(topic_acl("t", AclOperation.WRITE, ALLOW))


def test_only_literal_patterns_of_replicated_topics() -> None:
    bindings = [topic_acl("ord", AclOperation.READ, pattern=PREFIXED),
                topic_acl("payments", AclOperation.READ), topic_acl("orders", AclOperation.READ)]
    assert synced(bindings, topics=("orders",)) == {("east.orders", "User:alice", "*", "READ", "ALLOW")}


def test_internal_topics_and_cycles_are_never_copied() -> None:
    bindings = [topic_acl("mm2-offsets.east.internal", AclOperation.READ), topic_acl("__consumer_offsets",
                AclOperation.READ), topic_acl("west.orders", AclOperation.READ)]
    assert synced(bindings) == set()


def test_heartbeats_follow_heartbeats_replication() -> None:
    bindings = [topic_acl("heartbeats", AclOperation.READ)]
    assert synced(bindings, topics=("orders",)) == {("east.heartbeats", "User:alice", "*", "READ", "ALLOW")}
    assert synced(bindings, topics=("orders",), heartbeats=False) == set()


def test_literal_wildcard_topic_is_mirrored_as_a_literal_name() -> None:
    # MM2 creates a literal ACL on "east.*": harmless, and what a hand-over to MM2 would create too.
    assert synced([topic_acl("*", AclOperation.READ)]) == {("east.*", "User:alice", "*", "READ", "ALLOW")}


def test_other_resource_types_are_ignored() -> None:
    group = AclBinding(ResourceType.GROUP, "g", LITERAL, "User:alice", "*", AclOperation.READ, ALLOW)
    assert synced([group]) == set()
