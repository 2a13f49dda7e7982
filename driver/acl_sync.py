"""Topic ACLs follow their topics to the target, with MirrorMaker 2's rules (sync.topic.acls.*).

MM2 4.3.1 (MirrorSourceConnector, checked against its bytecode): every interval it describes the
source's topic ACLs and creates on the target, for each binding that

- names a topic by a LITERAL pattern (PREFIXED and MATCH patterns are never copied),
- is not ALLOW WRITE (only the replication writes to a remote topic), and
- names a topic the replication copies (its filter, heartbeats, not internal, not a cycle),

the same binding on the remote topic (`east.orders`), with ALLOW ALL downgraded to ALLOW READ. Every
other binding is copied as it is, DENY ones included: a DENY that protects data on the source keeps
protecting its copy. ACLs are never deleted on the target. A target without an authorizer refuses
with SECURITY_DISABLED: one warning per replication, then silence, and the replication goes on.

A pass runs on a thread of its own (``start_pass``), never on the copy loop's: it waits on both
clusters (up to ``ADMIN_TIMEOUT_S`` each) and matches every binding's topic against the filters and
the srm-control lists, none of which may hold up the records.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

LOG = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0
LOGGED_BINDINGS = 10  # a change is logged with this many bindings named
# None matches any name, principal and host (the filter's documented use; its stubs say str).
ALL_TOPIC_ACLS = AclBindingFilter(
    ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
    AclOperation.ANY, AclPermissionType.ANY)


def should_replicate_acl(binding: AclBinding) -> bool:
    """MM2's shouldReplicateAcl: everything but ALLOW WRITE (DENY bindings too)."""
    return not (binding.permission_type == AclPermissionType.ALLOW
                and binding.operation == AclOperation.WRITE)


def target_binding(binding: AclBinding, remote_topic: str) -> AclBinding:
    """The binding on the remote topic: same principal, host and permission; ALLOW ALL becomes READ."""
    operation = binding.operation
    if binding.permission_type == AclPermissionType.ALLOW and operation == AclOperation.ALL:
        operation = AclOperation.READ
    return AclBinding(ResourceType.TOPIC, remote_topic, ResourcePatternType.LITERAL, binding.principal,
                      binding.host, operation, binding.permission_type)


def target_bindings(source_bindings: Iterable[AclBinding], eligible: Callable[[str], bool],
                    remote_name: Callable[[str], str]) -> list[AclBinding]:
    """The bindings to create on the target for the source's topic bindings, in a stable order."""
    wanted = {target_binding(b, remote_name(b.name)) for b in source_bindings
              if b.restype == ResourceType.TOPIC and b.resource_pattern_type == ResourcePatternType.LITERAL
              and should_replicate_acl(b) and eligible(b.name)}
    return sorted(wanted, key=describe)


def describe(binding: AclBinding) -> str:
    # The stubs type these as given to __init__ (enum, str or int); the binding holds them as enums.
    return (f"{binding.permission_type.name} {binding.operation.name} on {binding.name} for "  # type: ignore[union-attr]
            f"{binding.principal}@{binding.host}")


class TopicAclSync:
    """One replication's ACL sync; lives as long as its worker, so a warning is given once."""

    def __init__(self, source: str, target: str, remote_name: Callable[[str], str]) -> None:
        self.source, self.target, self.remote_name = source, target, remote_name
        self.passes = 0  # completed passes, for tests and operators' logs
        self._synced: list[AclBinding] | None = None
        self._warned: set[str] = set()
        self._pass: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether a pass started by ``start_pass`` is still under way."""
        return self._pass is not None and self._pass.is_alive()

    def start_pass(self, source_admin: AdminClient, target_admin: AdminClient,
                   eligible: Callable[[str], bool]) -> bool:
        """Starts one pass on a thread beside the caller; False (nothing started) while the last runs."""
        if self.running:
            return False
        self._pass = threading.Thread(target=self.run_once, args=(source_admin, target_admin, eligible),
                                      name=f"acl-sync-{self.source}->{self.target}", daemon=True)
        self._pass.start()
        return True

    def run_once(self, source_admin: AdminClient, target_admin: AdminClient,
                 eligible: Callable[[str], bool]) -> None:
        """One pass; never raises: ACLs must not stop the data."""
        try:
            self._sync(source_admin, target_admin, eligible)
        except Exception as exc:  # the cluster is down, a timeout: the next interval tries again
            self._warn_once(f"pass:{type(exc).__name__}", "topic ACLs of %s not synced to %s: %s",
                            self.source, self.target, exc)
        self.passes += 1

    def _sync(self, source_admin: AdminClient, target_admin: AdminClient,
              eligible: Callable[[str], bool]) -> None:
        # A source without an authorizer answers an empty list (librdkafka), so it simply has no ACLs.
        found = source_admin.describe_acls(ALL_TOPIC_ACLS, request_timeout=ADMIN_TIMEOUT_S).result()
        wanted = target_bindings(found, eligible, self.remote_name)
        if not wanted:
            self._report(wanted)
            return
        created: list[AclBinding] = []
        for binding, future in target_admin.create_acls(wanted, request_timeout=ADMIN_TIMEOUT_S).items():
            try:
                future.result()
                created.append(binding)
            except KafkaException as exc:
                self._refused(binding, exc)
        self._report(created)

    def _refused(self, binding: AclBinding, exc: KafkaException) -> None:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError.SECURITY_DISABLED:
            self._warn_once("no-authorizer", "%s has no authorizer: topic ACLs of %s are not synced "
                            "(set %s->%s.sync.topic.acls.enabled = false to silence this)",
                            self.target, self.source, self.source, self.target)
            return
        self._warn_once(f"binding:{describe(binding)}:{exc}", "could not sync ACL %s to %s: %s",
                        describe(binding), self.target, exc)

    def _report(self, synced: list[AclBinding]) -> None:
        if synced != self._synced:
            if synced:
                shown = "; ".join(describe(b) for b in synced[:LOGGED_BINDINGS])
                more = f" and {len(synced) - LOGGED_BINDINGS} more" if len(synced) > LOGGED_BINDINGS else ""
                LOG.info("%s->%s: %d topic ACLs on the target: %s%s", self.source, self.target, len(synced),
                         shown, more)
            self._synced = synced

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key in self._warned:
            LOG.debug(message, *args)
            return
        self._warned.add(key)
        LOG.warning(message, *args)
