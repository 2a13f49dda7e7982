"""The one place that builds confluent-kafka clients from the SRM config and creates topics.

Byte-array clients only (MM2 compatible: records are copied as opaque bytes). librdkafka errors from
topic creation are turned into one exception type naming the cluster and topic.

Every client carries a ``watch`` (``clients.client_faults.ClientWatch``, fed by its error callback)
and logs librdkafka's lines, rate-limited, under ``librdkafka.<alias>`` (``clients.librdkafka_logs``).
Admin requests wait by polling the client, because librdkafka serves the error callback only inside
``poll``: a rejected login is a ``ClusterRejected`` naming the cluster within about a second, not a
timeout 30 s later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Final

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ConsumerGroupDescription,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from clients.client_faults import ClientWatch, ClusterRejected, ClusterUnavailable, RequestRefused
from clients.client_renderings import kafka_client_config, security_of
from clients.librdkafka_logs import client_log_settings
from contract.config import SrmConfig

__all__ = ["ClusterRejected", "ClusterUnavailable", "RequestRefused"]

LOG = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 30.0
# What librdkafka itself waits for a request to a group coordinator (GroupAdmin): far longer than we do.
# librdkafka (2.16; its open issue 4605) aborts the whole process when such a request times out inside the
# client while the coordinator is unreachable and the same client reaches the coordinator later (its
# coordinator-request path then frees the request twice). So we give up first, after ADMIN_TIMEOUT_S, and
# drop the client, which ends the waiting request safely. librdkafka caps this timeout at 3600 s.
GROUP_REQUEST_TIMEOUT_S: Final = 900.0
# librdkafka's errors that mean "no answer" (the cluster down, unresolvable or silent), not a refusal.
UNANSWERED: Final = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                               KafkaError._RESOLVE, KafkaError._WAIT_COORD, KafkaError._DESTROY})
POLL_STEP_S = 0.1
METADATA_STEP_S = 1.0
# Every client gives up on a connection attempt and on a silent broker in bounded time (librdkafka's own
# defaults are 30 s and 60 s); `<alias>.socket.connection.setup.timeout.ms` and the like override them.
# A cluster back from an outage is found within 2 s (librdkafka's reconnect back-off grows to 10 s).
CLIENT_TIMEOUTS: dict[str, object] = {"socket.connection.setup.timeout.ms": 10_000,
                                       "socket.timeout.ms": 30_000, "reconnect.backoff.max.ms": 2000}
# A request refused for lack of permission: the cluster's ACLs, not an outage, so retrying soon will not
# help until someone grants it; the caller reports it and carries on with what it may do.
AUTHORIZATION_FAILURES = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                    KafkaError.CLUSTER_AUTHORIZATION_FAILED})
MAX_NAMED = 3  # topics named in one refusal; the rest are counted


class WatchedAdmin(AdminClient):
    watch: ClientWatch


class WatchedProducer(Producer):
    watch: ClientWatch


class WatchedConsumer(Consumer):
    watch: ClientWatch


def _watched(config: SrmConfig, alias: str, settings: dict[str, Any]) -> ClientWatch:
    """Adds the error callback to ``settings`` (the caller's own one wins)."""
    watch = ClientWatch(alias, security_of(config, alias)[1])
    settings.setdefault("error_cb", watch.error_cb)
    return watch


def watch_of(client: object) -> ClientWatch | None:
    return getattr(client, "watch", None)


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    replication_factor: int = -1  # -1: the broker's default.replication.factor (KIP-464)


@dataclass(frozen=True)
class TopicConfigEntry:
    """One topic config as described by the broker, reduced to what config sync decides on."""

    name: str
    value: str | None
    is_default: bool
    read_only: bool = False
    sensitive: bool = False
    static_broker: bool = False


@dataclass(frozen=True)
class GroupMembership:
    members: int
    members_with_partitions: int


def admin(config: SrmConfig, alias: str, overrides: Mapping[str, object] | None = None) -> WatchedAdmin:
    settings: dict[str, Any] = {**CLIENT_TIMEOUTS, **client_log_settings(alias),
                                **kafka_client_config(config, alias, role="admin"), **(overrides or {})}
    watch = _watched(config, alias, settings)
    client = WatchedAdmin(settings)
    client.watch = watch
    return client


# The Java producer's default since Kafka 4.0 (MM2's): at 20 ms the linger was most of the driver's
# replication latency; under full load batches fill before it runs out either way (bench/RESULTS.md,
# "LINGER_MS").
LINGER_MS: Final = 5


def producer(config: SrmConfig, alias: str, overrides: dict[str, object] | None = None,
             source: str | None = None, target: str | None = None) -> Producer:
    # murmur2 like Java's default partitioner: keyed records (progress) land where MM2 puts them.
    settings: dict[str, object] = {"linger.ms": LINGER_MS, "compression.type": "lz4",
                                   "enable.idempotence": True, "acks": "all",
                                   "partitioner": "murmur2_random", **CLIENT_TIMEOUTS,
                                   **client_log_settings(alias)}
    settings.update(kafka_client_config(config, alias, role="producer", source=source, target=target))
    settings.update(overrides or {})
    watch = _watched(config, alias, settings)
    client = WatchedProducer(settings)
    client.watch = watch
    return client


def consumer(config: SrmConfig, alias: str, group_id: str, overrides: dict[str, object] | None = None,
             source: str | None = None, target: str | None = None) -> Consumer:
    settings: dict[str, object] = {"group.id": group_id, "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                                   **CLIENT_TIMEOUTS, **client_log_settings(alias)}
    settings.update(kafka_client_config(config, alias, role="consumer", source=source, target=target))
    settings.update(overrides or {})
    watch = _watched(config, alias, settings)
    client = WatchedConsumer(settings)
    client.watch = watch
    return client


def check(client: object) -> None:
    """Serves the client's callbacks and raises ClusterRejected if it was refused (bad login, TLS)."""
    poll = getattr(client, "poll", None)
    if isinstance(client, AdminClient) and poll is not None:
        poll(0)
    watch = watch_of(client)
    if watch is not None:
        watch.check()


def await_result(client: object, future: Future, timeout_s: float = ADMIN_TIMEOUT_S,
                 grace_s: float = 5.0) -> Any:
    """``future.result()`` of an admin request, polling ``client`` meanwhile so that a refused login
    ends the wait at once (ClusterRejected) instead of at the request's timeout. ``grace_s``: how much
    longer than ``timeout_s`` to wait, so that librdkafka's own timeout normally answers first (0 where
    librdkafka's is deliberately the longer one, GROUP_REQUEST_TIMEOUT_S)."""
    deadline = time.monotonic() + timeout_s + grace_s
    poll = getattr(client, "poll", None)
    while not future.done() and time.monotonic() < deadline:
        if poll is not None:
            poll(POLL_STEP_S)
        else:
            time.sleep(POLL_STEP_S)
        check(client)
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        raise ClusterUnavailable(f"no answer to an admin request within {timeout_s:.0f} s") from None


class GroupAdmin:
    """The consumer-group requests of one cluster (a group's committed offsets, its description, offset
    commits), for workers that ask every interval. Two faults of librdkafka 2.16 shape it:

    - An admin request to a group coordinator that times out inside librdkafka while the coordinator is
      unreachable aborts the process once the same client reaches the coordinator (its issue 4605). So
      librdkafka is given GROUP_REQUEST_TIMEOUT_S, we give up after ``wait_s``, and a client whose
      request went unanswered (our deadline, librdkafka's timeout or transport failure) is dropped at
      once, which ends its requests safely; the next request makes a new client. (A client that lived
      through its coordinator's outage can also stay deaf to it.) A refusal keeps the client.
    - The admin API's ListConsumerGroupOffsets dereferences a consumer group the admin client does not
      have when the answer is NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (its issue 5040: a segfault),
      which a coordinator just started or moved answers. So committed offsets are read the way a
      consumer reads its own group's, by a consumer of that group that never joins it.
    """

    def __init__(self, config: SrmConfig, alias: str, overrides: Mapping[str, object] | None = None,
                 wait_s: float = ADMIN_TIMEOUT_S) -> None:
        self.alias, self.wait_s = alias, wait_s
        self._config, self._overrides = config, overrides
        self._client: WatchedAdmin | None = None
        self.dropped = 0  # clients dropped after an unanswered request, for logs and tests

    def committed(self, group: str, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The group's committed offsets of ``partitions`` (a negative offset where it has none)."""
        if not partitions:
            return []
        reader = consumer(self._config, self.alias, group, overrides={**(self._overrides or {}),
                                                                        "enable.partition.eof": False})
        try:
            return reader.committed(partitions, timeout=self.wait_s)
        except KafkaException as exc:
            if not unanswered(exc):
                raise
            raise ClusterUnavailable(f"{self.alias}: no answer to a request for the offsets of group "
                                     f"{group!r}: {exc}") from None
        finally:
            reader.close()

    def describe(self, group: str) -> ConsumerGroupDescription:
        return self._ask(f"a description of group {group!r}", lambda client: client.describe_consumer_groups(
            [group], request_timeout=GROUP_REQUEST_TIMEOUT_S)[group])

    def alter(self, group: str, partitions: list[TopicPartition]) -> ConsumerGroupTopicPartitions:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        return self._ask(f"new offsets of group {group!r}",
                         lambda client: client.alter_consumer_group_offsets(
                             request, request_timeout=GROUP_REQUEST_TIMEOUT_S)[group])

    def close(self) -> None:
        """Drops the client; librdkafka destroys it with its last reference, ending its requests."""
        self._client = None

    def _ask(self, what: str, send: Callable[[AdminClient], Future]) -> Any:
        if self._client is None:
            self._client = admin(self._config, self.alias, self._overrides)
        try:
            return await_result(self._client, send(self._client), self.wait_s, grace_s=0.0)
        except ClusterRejected:
            raise
        except (ClusterUnavailable, KafkaException) as exc:
            if isinstance(exc, KafkaException) and not unanswered(exc):
                raise
            failure = f"{self.alias}: no answer to a request for {what}: {exc}"
            _forget_frames(exc)
        # Raised outside the except clause, so that no exception chain holds the client: it dies here.
        self.close()
        self.dropped += 1
        raise ClusterUnavailable(failure)


def _forget_frames(exc: BaseException | None) -> None:
    """Drops the tracebacks of an exception chain: their frames hold the client that raised, and a
    future's exception and the frame awaiting that future hold each other (a cycle that only the garbage
    collector would end, at a time of its choosing)."""
    while exc is not None:
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def unanswered(exc: KafkaException) -> bool:
    """librdkafka's way of saying the cluster did not answer (rather than refused the request)."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in UNANSWERED


def cluster_metadata(client: AdminClient, alias: str, topic: str | None = None,
                     timeout_s: float = ADMIN_TIMEOUT_S) -> Any:
    """``list_topics`` in short steps: a blocking call serves no callbacks, so one long call would hide
    a refused login until it times out."""
    deadline = time.monotonic() + timeout_s
    while True:
        step = max(0.1, min(METADATA_STEP_S, deadline - time.monotonic()))
        try:
            return client.list_topics(topic, timeout=step)
        except KafkaException as exc:
            check(client)
            if time.monotonic() >= deadline:
                raise ClusterUnavailable(
                    f"cluster {alias!r} did not answer a metadata request: {exc}") from exc


def partition_counts(client: AdminClient, alias: str) -> dict[str, int]:
    """Topic -> partition count of every topic in the cluster."""
    metadata = cluster_metadata(client, alias)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def ensure_topics(client: AdminClient, alias: str, specs: list[TopicSpec]) -> list[str]:
    """Create the topics that do not exist yet; existing ones are left as they are. Returns the names
    this call created (a topic it created holds nothing written before it)."""
    if not specs:
        return []
    new = [NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor,
                    config=s.configs) for s in specs]
    refused: list[str] = []
    created: list[str] = []
    code = ""
    for name, future in client.create_topics(new, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            await_result(client, future)
            LOG.info("created topic %s on %s", name, alias)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() in AUTHORIZATION_FAILURES:
                refused.append(name)
                code = exc.args[0].name()
            elif exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ClusterUnavailable(f"cannot create topic {name!r} on {alias!r}: {exc}") from exc
    if refused:
        raise authorization_refusal(alias, "create topic", refused, code,
                                    "CREATE on the topic (or the cluster)")
    return created


def grow_partitions(client: AdminClient, alias: str, counts: dict[str, int]) -> None:
    """Raise topics to the given partition counts (never shrinks; a topic already there is fine)."""
    if not counts:
        return
    requests = [NewPartitions(name, count) for name, count in counts.items()]
    refused: list[str] = []
    code = ""
    for name, future in client.create_partitions(requests, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            await_result(client, future)
            LOG.info("grew topic %s on %s to %d partitions", name, alias, counts[name])
        except KafkaException as exc:
            if exc.args[0].code() in AUTHORIZATION_FAILURES:
                refused.append(name)
                code = exc.args[0].name()
            elif exc.args[0].code() != KafkaError.INVALID_PARTITIONS:  # raced: already grown
                raise ClusterUnavailable(f"cannot add partitions to {name!r} on {alias!r}: {exc}") from exc
    if refused:
        raise authorization_refusal(alias, "add partitions to", refused, code, "ALTER on the topic")


def authorization_refusal(alias: str, action: str, names: list[str], code: str,
                          needed: str) -> RequestRefused:
    """Names the cluster, the topics and the missing permission; librdkafka's own words add nothing
    ("Authorization failed.") and the principal's credentials never appear."""
    shown = ", ".join(repr(name) for name in sorted(names)[:MAX_NAMED])
    more = f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else ""
    return RequestRefused(alias, f"{alias}: not authorized to {action} {shown}{more} ({code}): "
                                 f"the client's principal needs {needed}", names)


def topic_configs(client: AdminClient, alias: str, topics: list[str]) -> dict[str, list[TopicConfigEntry]]:
    """Described configs of existing topics; topics deleted meanwhile are left out."""
    if not topics:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in topics]
    described: dict[str, list[TopicConfigEntry]] = {}
    for resource, future in client.describe_configs(resources, request_timeout=ADMIN_TIMEOUT_S).items():
        try:
            entries = await_result(client, future)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise ClusterUnavailable(
                f"cannot describe configs of {resource.name!r} on {alias!r}: {exc}") from exc
        described[resource.name] = [_config_entry(entry) for entry in entries.values()]
    return described


def _config_entry(entry: ConfigEntry) -> TopicConfigEntry:
    return TopicConfigEntry(entry.name, entry.value, entry.source == ConfigSource.DEFAULT_CONFIG,
                            bool(entry.is_read_only), bool(entry.is_sensitive),
                            entry.source == ConfigSource.STATIC_BROKER_CONFIG)


def alter_topic_configs(client: AdminClient, alias: str, topic: str, set_values: dict[str, str],
                        delete: set[str]) -> None:
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in set_values.items()]
    entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE) for name in delete]
    if not entries:
        return
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in client.incremental_alter_configs([resource], request_timeout=ADMIN_TIMEOUT_S).values():
        try:
            await_result(client, future)
        except KafkaException as exc:
            raise ClusterUnavailable(f"cannot alter configs of {topic!r} on {alias!r}: {exc}") from exc


def group_membership(groups: GroupAdmin, group: str) -> GroupMembership:
    """How many members a consumer group has, and how many of them hold partitions."""
    try:
        description = groups.describe(group)
    except KafkaException as exc:
        raise ClusterUnavailable(f"cannot describe group {group!r} on {groups.alias!r}: {exc}") from exc
    members = list(description.members or [])
    holding = sum(1 for m in members if m.assignment is not None and m.assignment.topic_partitions)
    return GroupMembership(len(members), holding)
