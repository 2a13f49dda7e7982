"""The live srm-control allow/deny lists of a target cluster, read from ``srm-control.internal``.

The record format is ``driver.control_record``; ``srm-control`` (``driver.control_cli``) writes it
through ``write_changes``. A record that does not decode is logged with its topic, partition and
offset and skipped: a bad record must not stop the replications that read the lists.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Final, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata

from clients import kafka_clients
from clients.client_renderings import kafka_client_config
from clients.kafka_clients import ClusterUnavailable, TopicSpec
from clients.record_guard import RecordGuard
from contract.config import SrmConfig
from contract.replication_policy import CONTROL_TOPIC
from driver.control_record import (
    LISTS,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    PARTITION,
    TOPIC_CONFIGS,
    ControlChange,
    ControlFormatError,
    decode_change,
    shown,
)
from driver.heartbeat_task import checked_replication_factor, fitted_replication_factor
from driver.topic_filter import ListedNames

LOG = logging.getLogger(__name__)

RF_SETTING: Final = "control.topic.replication.factor"
POLL_TIMEOUT_S: Final = 0.5
MAX_RETRY_WAIT_S: Final = 30.0
MAX_LIST_ENTRIES: Final = 1000
"""Entries one list takes; past it a new entry is refused (counted, logged) until others are removed.
Far above what operators keep by hand, and it bounds what one refresh matches a name against."""


ClientOverrides = Mapping[str, object] | None


class AllowDenyLists(Protocol):
    """What a replication reads of the srm-control lists (``ControlLists`` is the live one; tests
    pass fixed lists)."""

    def topic_lists(self, source: str, target: str) -> tuple[frozenset[str], frozenset[str]]: ...

    def group_lists(self, source: str, target: str) -> tuple[frozenset[str], frozenset[str]]: ...

    def version(self) -> int: ...


class ControlWriteError(RuntimeError):
    """Control records the target cluster did not acknowledge."""


class ControlRefused(ControlFormatError):
    """A well-formed control record the lists do not take: a full list, or a replication no driver
    reading this topic runs."""


ListKey = tuple[str, str, str, str]  # (source, target, kind, list)


class ControlState:
    """The lists as the records so far make them: (source, target, kind, list) -> entries.

    Bounded, since anyone who may produce to the topic can write records: at most
    ``MAX_LIST_ENTRIES`` entries a list, and, when ``target`` and ``sources`` are given, only lists
    of replications ``<one of sources> -> target`` (no driver reads any other from this topic).
    """

    def __init__(self, target: str | None = None, sources: Collection[str] | None = None) -> None:
        self.target, self.sources = target, None if sources is None else frozenset(sources)
        self._lists: dict[ListKey, set[str]] = {}
        self._shown: dict[ListKey, ListedNames] = {}  # the current version of each list, as matched

    def apply(self, change: ControlChange) -> bool:
        """Applies ``change``; True when a list changed (re-adding a present entry changes nothing).
        ControlRefused when the change is not taken (a full list, another replication's list)."""
        e = change.entry
        key = (e.source, e.target, e.kind, e.list_name)
        if self.target is not None and e.target != self.target:
            raise ControlRefused(f"entry for target {e.target!r} in the control topic of {self.target!r}")
        if self.sources is not None and e.source not in self.sources:
            raise ControlRefused(f"entry for source {e.source!r}, not a cluster that replicates to "
                                 f"{e.target!r} ({', '.join(sorted(self.sources)) or 'none'})")
        entries = self._lists.get(key, set())
        if change.present == (e.name in entries):
            return False
        if change.present:
            if len(entries) >= MAX_LIST_ENTRIES:
                raise ControlRefused(f"the {e.kind} {e.list_name} list of {e.source}->{e.target} is full "
                                     f"({MAX_LIST_ENTRIES} entries); remove some to add {e.name[:80]!r}")
            self._lists[key] = entries
            entries.add(e.name)
        else:
            entries.discard(e.name)
        self._shown.pop(key, None)
        return True

    def lists(self, source: str, target: str, kind: str) -> tuple[ListedNames, ListedNames]:
        """(allow, deny) of ``kind`` for the replication ``source -> target``: the same objects until
        a list changes, so what they matched is remembered for the version."""
        allow, deny = (self._listed((source, target, kind, name)) for name in LISTS)
        return allow, deny

    def _listed(self, key: ListKey) -> ListedNames:
        listed = self._shown.get(key)
        if listed is None:
            listed = self._shown[key] = ListedNames(self._lists.get(key, ()))
        return listed


def cluster_metadata(config: SrmConfig, alias: str, client: AdminClient, timeout_s: float,
                     topic: str | None = None) -> ClusterMetadata:
    """Metadata of cluster ``alias`` (of one ``topic`` only, when given); ClusterUnavailable naming
    the cluster and its servers when it does not answer within ``timeout_s``."""
    try:
        return kafka_clients.cluster_metadata(client, alias, topic, timeout_s)
    except kafka_clients.ClusterRejected:
        raise
    except ClusterUnavailable as exc:
        cause = exc.__cause__
        reason = (cause.args[0].str() if isinstance(cause, KafkaException) and cause.args
                  and isinstance(cause.args[0], KafkaError) else str(exc))
        servers = config.clusters[alias].bootstrap_servers
        raise ClusterUnavailable(f"cluster {alias!r} ({servers}) did not answer within {timeout_s:g} s: "
                                 f"{reason}") from exc


def ensure_control_topic(config: SrmConfig, alias: str, client: AdminClient, timeout_s: float) -> bool:
    """Creates the control topic on cluster ``alias`` unless it exists; ClusterUnavailable if unreachable.
    True when this call created it."""
    metadata = cluster_metadata(config, alias, client, timeout_s)
    if CONTROL_TOPIC in metadata.topics and metadata.topics[CONTROL_TOPIC].error is None:
        return False
    wanted = checked_replication_factor(config, RF_SETTING, None, alias)
    rf = fitted_replication_factor(client, alias, wanted, RF_SETTING)
    return bool(kafka_clients.ensure_topics(client, alias, [TopicSpec(CONTROL_TOPIC, 1, TOPIC_CONFIGS, rf)]))


def write_changes(config: SrmConfig, alias: str, changes: Iterable[ControlChange], timeout_s: float,
                  client_overrides: ClientOverrides = None) -> None:
    """Writes ``changes`` to the control topic of cluster ``alias`` and waits for the acknowledgements."""
    ensure_control_topic(config, alias, kafka_clients.admin(config, alias, client_overrides), timeout_s)
    # Not idempotent: a record per entry, latest wins, so a resend changes nothing, and the writer needs
    # Write on this topic only (an idempotent producer needs a producer id, which takes Write on some
    # topic or IdempotentWrite: without them librdkafka fails the whole producer, not the record).
    producer = kafka_clients.producer(config, alias, overrides={
        "linger.ms": 0, "message.timeout.ms": max(1000, int(timeout_s * 1000)), "enable.idempotence": False,
        **(client_overrides or {})})
    failures: list[str] = []

    def delivered(key: bytes, err: KafkaError | None, _msg: Message) -> None:
        # The key as sent, not msg.key(): after a fatal error (no Write anywhere on the cluster, so no
        # producer id) the message's methods raise inside the callback.
        if err is not None:
            failures.append(f"{shown(key)}: {err.str()}")

    try:
        for change in changes:
            key = change.entry.encode_key()
            producer.produce(CONTROL_TOPIC, key=key, value=change.encode_value(), partition=PARTITION,
                             on_delivery=functools.partial(delivered, key))
        unsent = producer.flush(timeout_s)
    except KafkaException as exc:  # a fatal producer error: one line, as any refusal
        reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        raise ControlWriteError(f"{CONTROL_TOPIC} on {alias!r}: {reason}") from None
    if failures or unsent:
        raise ControlWriteError(f"{CONTROL_TOPIC} on {alias!r}: {unsent} record(s) unacknowledged after "
                                f"{timeout_s:g} s; failed: {'; '.join(failures) or 'none'}")


class ControlLists:
    """The live lists of one target cluster, read from the beginning of its control topic.

    A background thread applies every record as it arrives; ``version()`` grows with every change
    that alters a list, so readers refresh only when something changed.
    """

    def __init__(self, config: SrmConfig, alias: str, poll_timeout_s: float = POLL_TIMEOUT_S,
                 client_overrides: ClientOverrides = None) -> None:
        # Built now so an unknown alias or a client setting librdkafka cannot take fails at start-up.
        kafka_client_config(config, alias, role="consumer")
        checked_replication_factor(config, RF_SETTING, None, alias)
        self.config, self.alias, self.poll_timeout_s = config, alias, poll_timeout_s
        self.client_overrides = dict(client_overrides or {})
        self._state = ControlState(alias, [a for a in config.clusters if a != alias])
        self._version = 0
        self._lock = threading.Lock()
        self._loaded = threading.Event()
        self._end_offset = 0  # high watermark when reading began: reaching it means loaded
        self._next_offset = OFFSET_BEGINNING  # where a reopened consumer goes on
        self._stopping = threading.Event()
        self.guard = RecordGuard(f"srm-control reader of {alias}", max_key_bytes=MAX_KEY_BYTES,
                                 max_value_bytes=MAX_VALUE_BYTES, logger=LOG)
        self.failure: str | None = None  # the last error outside a record, until reading resumes
        self._thread = threading.Thread(target=self._run, name=f"control-lists-{alias}", daemon=True)

    def topic_lists(self, source: str, target: str) -> tuple[ListedNames, ListedNames]:
        with self._lock:
            return self._state.lists(source, target, "topics")

    def group_lists(self, source: str, target: str) -> tuple[ListedNames, ListedNames]:
        with self._lock:
            return self._state.lists(source, target, "groups")

    def version(self) -> int:
        with self._lock:
            return self._version

    def start(self) -> ControlLists:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_until_loaded(self, timeout_s: float) -> bool:
        """True once every record that existed when reading began has been applied."""
        return self._loaded.wait(timeout_s)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        """Reads until stopped. A bad record is the guard's business; any other failure (the client,
        the cluster) reopens the consumer after a pause, and the last lists stay in force meanwhile."""
        wait_s = 1.0
        while not self._stopping.is_set():
            consumer = self._open()
            if consumer is None:
                return
            try:
                while not self._stopping.is_set():
                    for message in consumer.consume(100, timeout=self.poll_timeout_s):
                        self._handle(message)
                    self.failure = None
            except Exception as exc:  # never the end of the lists: read again
                self.failure = f"{type(exc).__name__}: {exc}"
                LOG.warning("reading %s on %s failed (%s); reading it again in %.0f s", CONTROL_TOPIC,
                            self.alias, self.failure, wait_s)
                self._stopping.wait(wait_s)
                wait_s = min(wait_s * 2, MAX_RETRY_WAIT_S)
            finally:
                consumer.close()

    def _open(self) -> Consumer | None:
        """A consumer at the start of the topic, once the cluster answers; None when stopping."""
        wait_s = 1.0
        while not self._stopping.is_set():
            try:
                client = kafka_clients.admin(self.config, self.alias, self.client_overrides)
                if ensure_control_topic(self.config, self.alias, client, timeout_s=10.0):
                    # Created just now, so empty: the lists are loaded. A busy broker may take seconds
                    # to serve the new topic, and replications need not wait for that (what is written
                    # to it meanwhile applies once read, as every later change does).
                    self._mark_loaded()
                return self._assigned_consumer()
            except (ClusterUnavailable, KafkaException) as exc:
                LOG.warning("control lists of %s not readable yet: %s; retrying in %.0f s", self.alias,
                            exc, wait_s)
                self._stopping.wait(wait_s)
                wait_s = min(wait_s * 2, MAX_RETRY_WAIT_S)
        return None

    def _assigned_consumer(self) -> Consumer:
        consumer = kafka_clients.consumer(
            self.config, self.alias, f"srm-control-reader-{uuid.uuid4().hex}",
            overrides={"enable.partition.eof": True, **self.client_overrides})
        try:
            partition = TopicPartition(CONTROL_TOPIC, PARTITION, self._next_offset)
            consumer.assign([partition])
            # A topic created a moment ago may have no leader yet: no offsets, and a retry.
            watermarks = consumer.get_watermark_offsets(partition, timeout=10.0)
            if watermarks is None:
                raise ClusterUnavailable(f"no offsets of {CONTROL_TOPIC} from {self.alias!r} within 10 s")
        except BaseException:
            consumer.close()
            raise
        low, high = watermarks
        self._end_offset = int(high)
        if high <= low:
            self._mark_loaded()
        return consumer

    def _handle(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._mark_loaded()
            else:
                LOG.warning("reading %s on %s: %s", CONTROL_TOPIC, self.alias, error)
            return
        self.guard.read(message, self._apply, self.alias)  # a refused change is counted as a bad record
        offset = message.offset()
        assert offset is not None  # a record has one
        self._next_offset = offset + 1
        if offset + 1 >= self._end_offset:
            self._mark_loaded()

    def _apply(self, key: bytes | None, value: bytes | None) -> ControlChange:
        change = decode_change(key, value)
        with self._lock:
            if self._state.apply(change):
                self._version += 1
        return change

    def _mark_loaded(self) -> None:
        if not self._loaded.is_set():
            LOG.info("control lists of %s loaded (version %d)", self.alias, self.version())
            self._loaded.set()
