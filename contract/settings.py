"""Every key the project reads from the SRM properties file: its type, scope and default, written once.

``SrmConfig.setting(key, source, target)`` reads a key through this table, so a default lives here and
nowhere else. Scopes say which prefixes a key may carry (``SrmConfig`` resolves them, most specific
first): ``replication`` keys may be set per ``<source>-><target>.``, per alias, under ``connectors.`` /
``workers.`` or bare; ``process`` keys belong to one process (the service, the aggregator) and are read
bare. Keys of the replications (``part = "driver"``) are type-checked when the file loads, since every
part reads the same file and a typo there would otherwise surface only when a task starts.

Cluster connection keys (``<alias>.bootstrap.servers`` and the Kafka client properties) are not in this
table: ``contract.client_keys`` says which keys they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

Default = bool | int | float | str | tuple[str, ...] | None
SettingType = Literal["boolean", "integer", "number", "string", "list"]
Scope = Literal["replication", "process", "cluster", "site"]
Part = Literal["driver", "aggregator", "service", "all"]

DEFAULT_REDIS_URL: Final = "redis://127.0.0.1:6379/0"
DEFAULT_SERVICE_PORT: Final = 6670  # SRM Service's default REST port
DEFAULT_METRICS_PERIOD_S: Final = 30.0
DEFAULT_METRICS_PERIOD_MS: Final = int(DEFAULT_METRICS_PERIOD_S * 1000)
# Subjects (remote topic-partitions, whole topics, groups' topic-partitions) a replication may have: twice
# the 100,000 partitions (in 10,000 topics: 110,000 subjects) the aggregator is sized and benched for on one
# target, which leaves room for checkpointed groups; a writer of srm-metrics.<src>.internal can cost no more.
DEFAULT_MAX_SUBJECTS: Final = 200_000


@dataclass(frozen=True)
class Setting:
    key: str
    type: SettingType
    default: Default
    part: Part
    doc: str
    scope: Scope = "replication"

    @property
    def positive(self) -> bool:
        """Intervals and periods must be above zero: zero or less would run their work on every pass of
        a loop (a describe + create of ACLs per copied batch). One rule for every such key, by name."""
        return self.type in ("integer", "number") and _INTERVAL_KEY.search(self.key) is not None


_INTERVAL_KEY: Final = re.compile(r"(?:^|\.)(?:interval|period)(?:\.|$)")


def _table(*settings: Setting) -> dict[str, Setting]:
    return {setting.key: setting for setting in settings}


def _driver(key: str, kind: SettingType, default: Default, doc: str) -> Setting:
    return Setting(key, kind, default, "driver", doc)


def _process(key: str, kind: SettingType, default: Default, part: Part, doc: str) -> Setting:
    return Setting(key, kind, default, part, doc, "process")


SETTINGS: Final[dict[str, Setting]] = _table(
    # --- clusters and who serves which --------------------------------------------------------------
    _process("clusters", "list", (), "all", "Cluster aliases (required)."),
    _process("driver.target.clusters", "list", None, "driver",
             "Target clusters this driver serves (default: every cluster not in service.remote.clusters)."),
    _process("service.target.clusters", "list", None, "all",
             "Target clusters whose metrics the aggregator rolls up and the service serves "
             "(default: driver.target.clusters)."),
    _process("service.remote.clusters", "list", (), "service",
             "Clusters whose heartbeats a gateway reads to discover remote services."),
    # --- replications (MirrorMaker 2 names and defaults) -------------------------------------------
    _driver("enabled", "boolean", False, "Replicate data and checkpoints for the pair."),
    _driver("topics", "list", (".*",), "Topics to replicate (regexes matching whole names)."),
    _driver("topics.exclude", "list", (r".*[\-\.]internal", r".*\.replica", "__.*"),
            "Topics never replicated (regexes)."),
    _driver("groups", "list", (".*",), "Consumer groups to checkpoint (regexes)."),
    _driver("groups.exclude", "list", ("console-consumer-.*", "connect-.*", "__.*"),
            "Consumer groups never checkpointed (regexes)."),
    _driver("emit.heartbeats.enabled", "boolean", True, "Send heartbeats, even for a disabled pair."),
    _driver("emit.heartbeats.interval.seconds", "number", 1.0, "Heartbeat interval."),
    _driver("emit.checkpoints.enabled", "boolean", True, "Emit consumer-group checkpoints."),
    _driver("emit.checkpoints.interval.seconds", "number", 60.0, "Checkpoint interval."),
    _driver("emit.offset-syncs.enabled", "boolean", True, "Emit offset syncs."),
    _driver("sync.group.offsets.enabled", "boolean", False,
            "Write translated offsets to inactive consumer groups in the target."),
    _driver("sync.group.offsets.interval.seconds", "number", 60.0, "Group offset sync interval."),
    _driver("refresh.topics.enabled", "boolean", True,
            "Look for new source topics periodically (false: only the topics found at start)."),
    _driver("refresh.topics.interval.seconds", "number", 600.0, "Interval between topic look-ups."),
    _driver("refresh.groups.enabled", "boolean", True,
            "Look for new consumer groups (false: only the groups found by the first look-up)."),
    _driver("refresh.groups.interval.seconds", "number", 600.0,
            "Upper bound only: groups are looked up at every checkpoint round, so found sooner."),
    _driver("sync.topic.configs.enabled", "boolean", True, "Copy topic configs to remote topics."),
    _driver("sync.topic.configs.interval.seconds", "number", 600.0,
            "Topic config sync interval (independent of refresh.topics.interval.seconds)."),
    _driver("sync.topic.acls.enabled", "boolean", True, "Copy topic ACLs to remote topics."),
    _driver("sync.topic.acls.interval.seconds", "number", 600.0, "Topic ACL sync interval."),
    _driver("config.properties.exclude", "list",
            ("follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
             "message.timestamp.difference.max.ms", "message.timestamp.type",
             "unclean.leader.election.enable", "min.insync.replicas"),
            "Topic configs never copied (names)."),
    _driver("use.defaults.from", "string", "target",
            "Whose broker defaults a remote topic keeps for configs left at default: target or source."),
    _driver("heartbeats.replication.enabled", "boolean", True, "Replicate heartbeats topics too."),
    _driver("replication.policy.class", "string", None,
            "DefaultReplicationPolicy (source.topic) or IdentityReplicationPolicy (topic)."),
    _driver("replication.policy.separator", "string", ".", "Separator of remote topic names."),
    _driver("replication.policy.internal.topic.separator.enabled", "boolean", True,
            "Use the separator in internal topic names too (KIP-949)."),
    _driver("exactly.once", "boolean", False, "Commit copies and progress in one Kafka transaction."),
    _driver("offset.lag.max", "integer", 100, "How stale a translated offset may get before a new sync."),
    _driver("offset-syncs.history.size", "integer", 1024,
            "Offset syncs kept per partition for tight offset translation (0: MM2's 64 slots only)."),
    _driver("tasks.max", "integer", 1,
            "Tasks per replication: each a fixed set of source partitions, moved whole between driver "
            "processes; with exactly.once, one transactional producer per task. Same on every process."),
    _driver("consumer.poll.timeout.ms", "integer", 1000, "Source consumer poll timeout."),
    _driver("replication.factor", "integer", -1, "Replication factor of remote topics (-1: broker's)."),
    _driver("heartbeats.topic.replication.factor", "integer", 3, "Replication factor of heartbeats."),
    _driver("checkpoints.topic.replication.factor", "integer", -1, "Replication factor of checkpoints."),
    _driver("offset-syncs.topic.replication.factor", "integer", -1,
            "Replication factor of offset syncs."),
    _driver("offset-syncs.topic.location", "string", "source",
            "Cluster holding the offset-syncs topic: source or target."),
    _process("control.lists.load.timeout.seconds", "number", 30.0, "driver",
             "Seconds the driver waits at start for its targets' srm-control lists before it replicates "
             "without them (they apply once read)."),
    _driver("control.topic.replication.factor", "integer", 3,
            "Replication factor of srm-control.internal (-1: broker's)."),
    _driver("metrics.period", "number", DEFAULT_METRICS_PERIOD_S, "Seconds between raw-metrics reports."),
    _driver("replication.queue.max.records", "integer", 100_000,
            "Copied records waiting for the target's acknowledgement; past it source partitions pause."),
    _driver("replication.queue.max.bytes", "integer", 33_554_432,
            "Bytes of copied records waiting for the target (as Java's buffer.memory); past it source "
            "partitions pause."),
    _driver("replication.fetch.queue.max.bytes", "integer", 16_777_216,
            "Bytes the source consumer fetches ahead of the copy (librdkafka's queued.max.messages.kbytes)."),
    _driver("replication.producer.partitions.per.broker", "integer", 250,
            "At least once: partitions led by one target broker that one producer of a worker copies; "
            "past it the worker copies through another (0: one producer)."),
    _driver("replication.producers.max", "integer", 4,
            "At least once: the most producers a worker copies through."),
    # --- aggregator --------------------------------------------------------------------------------
    _process("redis.url", "string", DEFAULT_REDIS_URL, "all", "Redis holding the rollups."),
    _process("redis.connect.timeout.ms", "integer", 5000, "all",
             "Timeout of a connection to Redis (a URL's socket_connect_timeout wins)."),
    _process("redis.socket.timeout.ms", "integer", 10_000, "all",
             "Timeout of one Redis reply: a hung Redis fails the call (a URL's socket_timeout wins)."),
    _process("aggregator.checkpoint.dir", "string", ".srm-checkpoints", "aggregator",
             "Spark checkpoint directory (one sub-directory per target cluster). On a local disk "
             "Spark writes its logs through Hadoop's FileSystem API "
             "(`spark.sql.streaming.checkpointFileManagerClass`, unless set): its default, FileContext, "
             "runs `chmod` and `readlink` processes for every file there. Other file systems keep "
             "Spark's default."),
    _process("aggregator.spark.master", "string", None, "aggregator",
             "Spark master (default: local[2], or spark-submit's)."),
    _process("aggregator.trigger.interval.ms", "integer", 2000, "aggregator", "Micro-batch trigger."),
    _process("aggregator.watermark.delay.seconds", "integer", 30, "aggregator",
             "How late a raw-metrics record may come and still count."),
    _process("aggregator.max.offsets.per.trigger", "integer", 200_000, "aggregator",
             "Records per micro-batch at most (0 = unbounded)."),
    _process("aggregator.max.subjects.per.replication", "integer", DEFAULT_MAX_SUBJECTS, "aggregator",
             "Topic, partition and group subjects one replication may have series of; a new one beyond it is "
             "refused and counted (srm_subjects_refused_total). A subject not reported for a day is "
             "forgotten."),
    _process("aggregator.metrics.topics.pattern", "string", None, "aggregator",
             "Java regex of the raw-metrics topics to read (default: all)."),
    _process("aggregator.stall.trigger.intervals", "integer", 30, "aggregator",
             "Trigger intervals a batch may run with input waiting before its query is restarted "
             "as stalled."),
    # --- service -----------------------------------------------------------------------------------
    _process("service.host", "string", "127.0.0.1", "service", "Address the REST API binds to."),
    _process("service.port", "integer", DEFAULT_SERVICE_PORT, "service", "REST API port."),
    _process("service.workers", "integer", 2, "service", "gunicorn worker processes."),
    _process("service.threads", "integer", 4, "service", "Threads per worker (1 = sync workers)."),
    _process("service.site", "string", None, "service",
             "This deployment's site name (default: its target aliases joined by '+')."),
    _process("service.auth.basic.username", "string", None, "service", "Basic auth user."),
    _process("service.auth.basic.password", "string", None, "service", "Basic auth password."),
    _process("service.auth.token", "string", None, "service", "Bearer token."),
    _process("service.cors.allowed.origins", "list", (), "service",
             "Browser origins (https://grafana.example.com) whose pages may call /grafana; none by default."),
    _process("service.advertised.protocol", "string", "http", "service", "Advertised scheme."),
    _process("service.advertised.host", "string", None, "service",
             "Advertised host (default: service.host, or this host's name when bound to all)."),
    _process("service.advertised.port", "integer", None, "service",
             "Advertised port (default: service.port)."),
    _process("service.advertised.root.path", "string", "", "service", "Advertised path prefix."),
    _process("service.advertisement.interval.seconds", "number", 10.0, "service",
             "Seconds between advertisements."),
    _process("service.remote.allowed.hosts", "list", (), "service",
             "Host globs or CIDRs a gateway may call (nothing by default)."),
    _process("service.max.points.per.request", "integer", 200_000, "service",
             "Series x windows one request may read; past it a 400 names the granularity that fits."),
    _process("service.max.request.bytes", "integer", 1_048_576, "service",
             "Largest request body (Grafana queries); past it a 413."),
    _process("service.grafana.max.targets", "integer", 50, "service",
             "Targets one Grafana /query may carry; past it a 400."),
    _process("service.remote.timeout.ms", "integer", 5000, "service",
             "Timeout of a call to a remote site (service.remote.<site>.timeout.ms per site)."),
    _process("service.remote.max.clock.skew.ms", "integer", 60_000, "service",
             "Advertisements stamped further ahead of this gateway's clock are refused."),
    _process("service.remote.credentials.without.auth", "boolean", False, "service",
             "Send service.remote.<site> credentials although this gateway's own auth is off (only "
             "behind a proxy that authenticates callers)."),
    _process("service.remote.max.sites", "integer", 64, "service",
             "Sites a gateway keeps from advertisements (sites with service.remote.<site>.url always)."),
    _process("service.remote.max.body.bytes", "integer", 1_048_576, "service",
             "Largest answer a gateway reads from a remote site; a larger one is that site's error."),
    _process("service.remote.max.concurrent.calls", "integer", 4, "service",
             "Calls to one remote site running at once; more wait for a free one until their deadline."),
    _process("service.remote.breaker.failures", "integer", 3, "service",
             "Timeouts or connection failures in a row after which a remote site is not called for a while."),
    _process("service.remote.breaker.open.ms", "integer", 30_000, "service",
             "How long a failing remote site is not called (doubling while it fails, at most 5 min)."),
)
"""The table; per-site keys (``service.remote.<site>.*``) follow ``service.remote.timeout.ms``."""

_Default = TypeVar("_Default")


def default_of(key: str, kind: type[_Default]) -> _Default:
    """The table's default of `key`, as the `kind` its reader takes (a TypeError on import if not)."""
    default = SETTINGS[key].default
    if not isinstance(default, kind):
        raise TypeError(f"the default of {key} is {default!r}, not a {kind.__name__}")
    return default

NAMED_SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("<alias>.bootstrap.servers", "list", None, "all",
            "host:port of the cluster's brokers (required for every alias in `clusters`).", "cluster"),
    Setting("service.remote.<site>.url", "string", None, "service",
            "Base URL (scheme://host:port[/root]) where a gateway calls <site>, whatever its advertisements "
            "say; its credentials go only there.", "site"),
    Setting("service.remote.<site>.username", "string", None, "service",
            "Basic auth user a gateway sends to the remote site <site>.", "site"),
    Setting("service.remote.<site>.password", "string", None, "service",
            "Basic auth password a gateway sends to <site> (with .username).", "site"),
    Setting("service.remote.<site>.token", "string", None, "service",
            "Bearer token a gateway sends to <site>.", "site"),
    Setting("service.remote.<site>.timeout.ms", "integer", None, "service",
            "Timeout of a call to <site> (default: service.remote.timeout.ms).", "site"),
)
"""Keys with a name inside (a cluster alias, a remote site): read directly where they are used, listed
here so the configuration reference shows them. Kafka client properties (``<alias>.security.protocol``
and the rest) are ``contract.client_keys``'s."""

PARSED_ON_LOAD: Final = frozenset(
    key for key, setting in SETTINGS.items()
    if (setting.part == "driver" and setting.type in ("boolean", "integer", "number")) or setting.positive
)
"""Keys type-checked (and, for intervals, checked positive) when the file loads, under any scope prefix."""
