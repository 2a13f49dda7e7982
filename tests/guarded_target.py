"""A target cluster that enforces ACLs, for tests of what the driver does when it is refused.

`guarded_west` (tests/conftest.py) is one KRaft node with KRaft's StandardAuthorizer and the secured
listeners: PLAINTEXT (test set-up, the aggregator, the service) is the super user, the SCRAM user on
the SASL listener has only what a test grants. `Grants` grants through PLAINTEXT and revokes on exit,
so one test's grants never reach the next.
"""

from __future__ import annotations

from types import TracebackType

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def allow(principal: str, pattern: ResourcePatternType, name: str, *operations: AclOperation,
          resource: ResourceType = ResourceType.TOPIC) -> list[AclBinding]:
    return [AclBinding(resource, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
            for op in operations]


def replication_without_create(principal: str, source: str) -> list[AclBinding]:
    """What a replication from ``source`` needs on its target, except creating remote topics: its
    internal topics (raw metrics, srm-control, progress, heartbeats), its consumer groups, and
    everything else on `<source>.*` (write, describe, configs, partitions)."""
    return [
        *allow(principal, PREFIXED, "srm-", AclOperation.ALL),
        *allow(principal, LITERAL, f"mm2-offsets.{source}.internal", AclOperation.ALL),
        *allow(principal, LITERAL, "heartbeats", AclOperation.ALL),
        *allow(principal, PREFIXED, "srm-", AclOperation.ALL, resource=ResourceType.GROUP),
        *allow(principal, PREFIXED, f"{source}.", AclOperation.WRITE, AclOperation.DESCRIBE,
               AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.ALTER)]


class Grants:
    """ACLs granted on a cluster as its super user, all revoked when the block ends."""

    def __init__(self, bootstrap: str) -> None:
        self.client = AdminClient({"bootstrap.servers": bootstrap})
        self.granted: list[AclBinding] = []

    def grant(self, bindings: list[AclBinding]) -> None:
        for future in self.client.create_acls(bindings, request_timeout=30).values():
            future.result()
        self.granted += bindings

    def __enter__(self) -> Grants:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                    b.operation, b.permission_type) for b in self.granted]
        if filters:
            for future in self.client.delete_acls(filters, request_timeout=30).values():
                future.result()
