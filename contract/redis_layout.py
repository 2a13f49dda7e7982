"""The Redis key layout of the rollups: the aggregator writes through it, the service reads through it.

Pure Python (no redis import), so both sides and the unit tests share one definition of every key
name, member encoding, window size and retention (docs/architecture.md draws the whole layout).

- A series is one metric of one subject (a remote topic-partition, a whole remote topic, or a consumer
  group's topic-partition) of one replication into one target, at one window size. The windows of all
  of a subject's metrics at one size share a hash (`series_key`): field = window start (epoch ms, in
  decimal), value = the window's member, `<start>` then `;<i>:<count>:<sum>:<min>:<max>:<last>:<last ts>`
  for each metric the window holds, `i` its position in WINDOW_METRICS, in that order (`last ts`: the
  event ts of `last`, so a later batch can merge into the window). One member for a window's eight metrics
  instead of eight keys: Redis's work in a merge is per command, and this cut it by ~75 %. A hash, not a
  sorted set scored by start: a window the merge replaces is one HSET of its field, where a sorted set
  needed its old member removed first (two commands a window, and a key emptied on the way lost its TTL);
  readers ask for the window starts of their range (`window_fields`, a grid of the window's size).
  The sink replaces each window a batch touches by its merged value in the same MULTI as the batch id,
  so a replayed Spark batch is recognised and skipped (redis_sink).
- Keys carry a hash tag `{target|source|topic}` so that Redis Cluster keeps a topic's series on one
  slot (one pipeline, one MULTI).
- Index sets per target let the service discover sources, topics, partitions and groups without KEYS.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import orjson

PREFIX = "srm"
WHOLE_TOPIC = -1  # partition number of a topic-level series (all partitions merged)
ALL_TOPICS = "*"  # topic of a replication-level series (all topics merged; partition WHOLE_TOPIC)
# Metrics rolled up per replication too (topic ALL_TOPICS, partition WHOLE_TOPIC): the topics' windows
# merged as a reader would merge them (merge_windows), stored once so that a replication's or a
# cluster's answer reads one series per replication, not one per topic. A cluster's total is the merge
# of these over the sources in sources_key(target): readers merge them, nothing stores it. Offsets are
# left out: a sum of offsets across topics means nothing.
REPLICATION_LEVEL_METRICS = ("record_count", "byte_count", "replication_latency_ms", "record_age_ms",
                             "records_lag")
# Raw records that do not parse, per raw-metrics topic partition: a series under the source named by
# the topic (topic ALL_TOPICS, partition = the Kafka partition), count = records, min/max/last = their
# Kafka offsets, windows by Kafka timestamp; the running total is invalid_records_key(). Records whose
# ts is more than 10 min after their Kafka timestamp count here too (aggregator.raw_records).
INVALID_RECORDS_METRIC = "invalid_records"
# The metrics a window member can hold, by position: a member names each metric by its index here, so
# stored members stay readable only while this tuple grows at its end and nothing in it moves.
WINDOW_METRICS = ("record_count", "byte_count", "replication_latency_ms", "record_age_ms", "records_lag",
                  "source_end_offset", "upstream_offset", "target_offset", "checkpoint_latency_ms",
                  "group_upstream_offset", "group_downstream_offset", "group_lag", "lag_seconds",
                  "group_lag_seconds", INVALID_RECORDS_METRIC)
METRIC_INDEX = {metric: i for i, metric in enumerate(WINDOW_METRICS)}


@dataclass(frozen=True)
class Window:
    name: str
    size_ms: int
    retention_ms: int


WINDOWS: dict[str, Window] = {
    w.name: w
    for w in (
        Window("10s", 10_000, 6 * 3_600_000),
        Window("1m", 60_000, 7 * 86_400_000),
        Window("1h", 3_600_000, 90 * 86_400_000),
    )
}
FINEST_WINDOW = WINDOWS["10s"]
# Keys outlive the start of their newest window by retention and a slack, less a trim period at most
# (set when a window is created in a new trim period, trim_period_ms, not on every merge), so a quiet
# series is still readable for its retention, then vanishes.
TTL_SLACK_MS = 3_600_000
# `auto` granularity: the finest window giving at most this many points over the range.
AUTO_MAX_POINTS = 720


# Slotted: the aggregator keeps ~10^5-10^6 of these (window_history), a dict each cost memory and time.
@dataclass(frozen=True, slots=True)
class SeriesId:
    target: str
    source: str
    topic: str  # remote (downstream) topic, or ALL_TOPICS
    partition: int  # or WHOLE_TOPIC
    metric: str
    group: str | None = None  # set for checkpoint (consumer-group) series
    # Hashed once: the sink looks each series of a live batch up in dicts ~24 times (~5 * 10^4 hashes of
    # six fields a batch of 2,000 partitions).
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.target, self.source, self.topic, self.partition,
                                                self.metric, self.group)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[SeriesId], tuple[Any, ...]]:
        # Rebuilt from its fields: a string's hash differs between processes, so the cached one must not
        # travel in a pickle.
        return SeriesId, (self.target, self.source, self.topic, self.partition, self.metric, self.group)


# A value: never changed once made, and hashable. Not frozen: a frozen dataclass sets each field through
# object.__setattr__ (several times slower: bench/RESULTS.md, "WindowAggregate"), and the sink makes
# ~7 * 10^4 of these a batch of 200k records, the service one per window member it reads.
@dataclass(slots=True, unsafe_hash=True)
class WindowAggregate:
    start_ms: int
    count: float
    sum: float
    min: float
    max: float
    last: float
    # Event ts of `last` (None when unknown): what a merge compares. Not part of a window's value.
    last_ts: int | None = field(default=None, compare=False)

    @property
    def avg(self) -> float:
        return self.sum / self.count if self.count else 0.0


@lru_cache(maxsize=65_536)  # the sink encodes the same few names for every window of a batch
def _part(text: str) -> str:
    # Group ids may hold any character; escaping keeps ':', '|', '{' and '}' as separators only.
    return quote(text, safe="._-*")


@lru_cache(maxsize=65_536)  # the sink names a latest hash for every partition of every batch
def _tag(target: str, source: str, topic: str) -> str:
    return "{" + "|".join(_part(x) for x in (target, source, topic)) + "}"


def series_key(series: SeriesId, window: str) -> str:
    """The hash of the series' windows at one size (field = window start, value = its member): shared by
    every metric of its subject (the metric is in the members, not in the key)."""
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r}; expected one of {', '.join(WINDOWS)}")
    group = "" if series.group is None else _part(series.group)
    tag = _tag(series.target, series.source, series.topic)
    return f"{PREFIX}:wh:{tag}:{series.partition}:{group}:{window}"


def window_fields(window: str, from_ms: int, to_ms: int) -> list[str]:
    """The fields of a series_key hash that can hold a window starting in [from_ms, to_ms]: every start
    of the window's grid there (a window starts at a multiple of its size, window_start). A reader asks
    HMGET for them and keeps the values that are not nil (`held`); its range is bounded by its point budget
    (service.point_budget), the aggregator's by what it merges."""
    size = WINDOWS[window].size_ms
    first = from_ms + (-from_ms) % size
    return list(map(str, range(first, to_ms + 1, size)))


# The field of a series_key hash holding its newest window's start (the merge writes it with that window):
# what lets a reader ask for "every window from a start on" (READ_WINDOWS_LUA) without a grid to the clock.
NEWEST_FIELD = "n"
# A hash's windows from a start on, in one call whatever the hash holds: KEYS[1] the hash, ARGV the oldest
# start wanted and the window's size. The grid from there to the newest window (NEWEST_FIELD) when that is
# shorter than the hash, else the hash's own fields: a read after a long gap or a replay of days costs what
# the hash holds, not the span. Members in no particular order.
READ_WINDOWS_LUA = """
local key, low, step = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local newest = tonumber(redis.call('HGET', key, 'n'))
local out = {}
if newest == nil or newest < low then
  return out
end
local first = low + (step - low % step) % step
if (newest - first) / step + 1 > redis.call('HLEN', key) then
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local start = tonumber(all[i])
    if all[i] ~= 'n' and start ~= nil and start >= low then
      out[#out + 1] = all[i + 1]
    end
  end
  return out
end
for from = first, newest, 1000 * step do
  local names = {}
  for start = from, math.min(from + 999 * step, newest), step do
    names[#names + 1] = string.format('%d', start)
  end
  for _, value in ipairs(redis.call('HMGET', key, unpack(names))) do
    if value then
      out[#out + 1] = value
    end
  end
end
return out
"""


def hash_members(fields: Mapping) -> list:
    """The members of a series_key hash read whole (HGETALL: field -> value), oldest first."""
    starts = []
    for name, value in fields.items():
        text = name.decode() if isinstance(name, bytes) else name
        if text.lstrip("-").isdigit():
            starts.append((int(text), value))
    return [value for _, value in sorted(starts, key=lambda pair: pair[0])]


def held(values: list) -> list:
    """The members an HMGET of window_fields returned: the windows the hash holds, oldest first."""
    return [v for v in values if v is not None]


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and math.isfinite(x) else repr(float(x))


def encode_member(start_ms: int, windows: Mapping[str, WindowAggregate]) -> str:
    """One window of a subject: each metric's value (count > 0) at `start_ms`, metrics in WINDOW_METRICS
    order, so equal windows always make equal members (what a replaced member is matched by)."""
    segments = [str(start_ms)]
    for metric in sorted(windows, key=_metric_index):
        agg = windows[metric]
        last_ts = agg.start_ms if agg.last_ts is None else agg.last_ts
        values = [agg.count, agg.sum, agg.min, agg.max, agg.last]
        segments.append(":".join([str(METRIC_INDEX[metric]), *map(_number, values), str(int(last_ts))]))
    return ";".join(segments)


def _metric_index(metric: str) -> int:
    try:
        return METRIC_INDEX[metric]
    except KeyError:
        raise ValueError(f"metric {metric!r} has no place in a window member") from None


def decode_member(member: str | bytes) -> tuple[int, dict[str, WindowAggregate]]:
    """(start, metric -> its window) of a stored member; ValueError naming the member if it is not one."""
    text = member.decode() if isinstance(member, bytes) else member
    head, *segments = text.split(";")
    try:
        start = int(head)
        windows = {}
        for segment in segments:
            metric, agg = _segment(start, segment)
            if metric in windows:
                raise ValueError(text)
            windows[metric] = agg
        if not windows:
            raise ValueError(text)
    except (ValueError, IndexError):
        raise ValueError(f"not a window member: {text!r}") from None
    return start, windows


def metric_window(member: str | bytes, metric: str) -> WindowAggregate | None:
    """One metric's window in a stored member (None when the window holds none of it); ValueError when the
    member is not one."""
    return decode_member(member)[1].get(metric)


def _segment(start: int, segment: str) -> tuple[str, WindowAggregate]:
    index, count, total, low, high, last, last_ts = segment.split(":")
    position = int(index)
    agg = WindowAggregate(start, float(count), float(total), float(low), float(high), float(last),
                          int(last_ts))
    if not (agg.count > 0 and 0 <= position < len(WINDOW_METRICS)):  # a window holds a sample or more
        raise ValueError(segment)
    return WINDOW_METRICS[position], agg


def merge_windows(a: WindowAggregate, b: WindowAggregate) -> WindowAggregate:
    """The window holding the samples of both (same start); stored_windows does the same on Arrow.

    `last` is the value with the greatest (last ts, value): ties break by value, so the result does not
    depend on the order partials are merged in. A member without last ts counts as its window's start.
    """
    a_last = (a.start_ms if a.last_ts is None else a.last_ts, a.last)
    b_last = (b.start_ms if b.last_ts is None else b.last_ts, b.last)
    last_ts, last = max(a_last, b_last)
    return WindowAggregate(a.start_ms, a.count + b.count, a.sum + b.sum, min(a.min, b.min), max(a.max, b.max),
                           last, last_ts)


def window_start(ts_ms: int, window: str) -> int:
    size = WINDOWS[window].size_ms
    return ts_ms - ts_ms % size


def key_ttl_ms(window: str) -> int:
    return WINDOWS[window].retention_ms + TTL_SLACK_MS


# A key is trimmed to its retention, and its lifetime set again, when a window is created in a newer trim
# period than the key's newest (aggregator.stored_windows), not at every window created: its lifetime past
# its newest window then stays above retention + slack - this, and it holds up to this much more than its
# retention.
TRIM_EVERY_MS = TTL_SLACK_MS // 6


def trim_period_ms(window: str) -> int:
    return max(WINDOWS[window].size_ms, TRIM_EVERY_MS)


def auto_window(from_ms: int, to_ms: int) -> str:
    span = max(0, to_ms - from_ms)
    for window in WINDOWS.values():
        if span / window.size_ms <= AUTO_MAX_POINTS:
            return window.name
    return "1h"


# --- discovery indexes (sets and hashes per target, refreshed with the data's TTL) -------------------

def targets_key() -> str:
    return f"{PREFIX}:idx:targets"


def sources_key(target: str) -> str:
    return f"{PREFIX}:idx:{{{_part(target)}}}:sources"


def topics_key(target: str, source: str) -> str:
    """Hash: remote topic -> upstream topic, for addressing by either name."""
    return f"{PREFIX}:idx:{_tag(target, source, ALL_TOPICS)}:topics"


def partitions_key(target: str, source: str, topic: str) -> str:
    return f"{PREFIX}:idx:{_tag(target, source, topic)}:partitions"


def groups_key(target: str, source: str) -> str:
    return f"{PREFIX}:idx:{_tag(target, source, ALL_TOPICS)}:groups"


def batch_key(query_name: str) -> str:
    """Hash of a query's sink state, written in the same MULTI as each batch is staged: `batch_id` (the
    last Spark batch committed) and `max_event_ts` (the newest event ts seen, from which the watermark
    follows).

    The streaming sink passes `<query name>:<Spark query id>`: batch ids restart at 0 with a new
    checkpoint, and the query id (kept in the checkpoint) changes with it."""
    return f"{PREFIX}:batch:{_part(query_name)}"


def staged_batch_key(query_name: str, batch_id: int) -> str:
    """A committed batch's partial windows (Arrow IPC) until they are merged into the windows; deleted in
    the MULTI that merges them (window_writer)."""
    return f"{batch_key(query_name)}:staged:{batch_id}"


def applied_batch_key(query_name: str) -> str:
    """The last batch whose windows are merged (window_writer); apart from batch_key, which every batch
    writes, so a merge can WATCH it without the next batch's staging aborting it."""
    return f"{batch_key(query_name)}:applied"


def finest_applied_batch_key(query_name: str) -> str:
    """The last batch whose finest (10 s) windows are merged, when that is past applied_batch_key (the
    coarser windows are merged less often: window_writer); absent, it is applied_batch_key."""
    return f"{batch_key(query_name)}:applied:finest"


def merging_batches_key(query_name: str) -> str:
    """Hash of a merge in progress (window_writer): `first` and `last`, the batches merged together,
    `sizes` ("all" or "finest": which window sizes it writes; absent, all), and `parts`, the merge's parts
    already in Redis (comma-separated numbers). Written with each part, deleted with the last one (which
    advances applied_batch_key or finest_applied_batch_key), so a merge cut off part-way is finished on
    restart without merging a part twice."""
    return f"{batch_key(query_name)}:merging"


INDEX_TTL_MS = WINDOWS["1h"].retention_ms + TTL_SLACK_MS


# --- latest values (for status, lag in seconds and dashboards) ------------------------------------
# Hashes overwritten with the newest report; each field is a JSON object carrying its own `ts`, so a
# writer can refuse to replace a newer value with an older one (replays, late records).
LATEST_TTL_MS = 7 * 86_400_000


# How many metrics periods `recent_record_counts` covers.
RECENT_PERIODS = 10


def replication_status_key(target: str, source: str) -> str:
    """Hash with one field, `replication`: the driver's last replication report (status, error,
    report ts, period, workers, tasks, last heartbeat ts, topics replicated, enabled) plus what the
    aggregator derives (recent per-period record counts, oldest first).

    JSON fields: `ts` (report, epoch ms), `period_ms`, `status`, `error` (str or null), `workers`,
    `tasks`, `last_heartbeat_ts` (epoch ms or null), `topics_replicated`, `enabled` (bool),
    `readers` (null from a driver that reports none; else reader kind -> {rejected, alive,
    last_rejection}, raw_metrics.READER_KINDS) and `recent_record_counts` (list of ints, RECENT_PERIODS
    at most, the last one the period ending at `ts`). A period is (ts - (k+1)*period_ms,
    ts - k*period_ms]; it gets the replication-level record_count 10 s windows whose start lies in it,
    so with periods shorter than 10 s a window's records land in one period and its neighbour shows 0.

    Field `lag`: the summary of the replication's lag verdicts (lag_verdicts_key)."""
    return f"{PREFIX}:latest:{_tag(target, source, ALL_TOPICS)}:replication"


def lag_verdicts_key(target: str, source: str) -> str:
    """Hash: field `<remote topic>|<partition>` -> the partition's lag verdict at its newest report
    (contract.lag_verdicts.verdict_record). Their summary is field `lag` of replication_status_key
    (contract.lag_verdicts.summary_record), which status answers read instead of every partition."""
    return f"{PREFIX}:latest:{_tag(target, source, ALL_TOPICS)}:lag"


def partition_latest_key(target: str, source: str, topic: str) -> str:
    """Hash: field `<partition>` -> {ts, records_lag, lag_seconds, source_end_offset, upstream_offset,
    target_offset} of one remote topic's partitions.

    `lag_seconds` (float or null) is kafka-lag-exporter's interpolation at the report's `ts`: when the
    source end offset passed the next offset to replicate (source_end_offset - records_lag). The
    offset history is the partition's source_end_offset 10 s windows (point = window `last` at the
    window's middle; the report itself is the newest point): null with fewer than two points, 0 when
    caught up."""
    return f"{PREFIX}:latest:{_tag(target, source, topic)}:partitions"


def group_latest_key(target: str, source: str, group: str) -> str:
    """Hash: field `<remote topic>|<partition>` -> {ts, group_lag, lag_seconds, upstream_offset,
    downstream_offset} of one checkpointed consumer group.

    The group consumes the upstream topic, so `lag_seconds` asks the upstream end-offset history (the
    remote topic-partition's source_end_offset windows, as for partitions) when it passed the group's
    committed upstream offset. The downstream history would add the replication's own delay to the
    group's, and a translated downstream offset only moves at checkpoints."""
    return f"{PREFIX}:latest:{_tag(target, source, ALL_TOPICS)}:group:{_part(group)}"


def group_latest_field(topic: str, partition: int) -> str:
    return f"{topic}|{partition}"


def cluster_reachability_key(target: str) -> str:
    """String: what the aggregator last found probing target cluster `target` (JSON `ts` = the probe,
    epoch ms; `reachable` (bool); `since` = when the cluster last changed between reachable and not;
    `error` (str or null)). It expires after CLUSTER_PROBE_TTL_MS: no aggregator, no verdict."""
    return f"{PREFIX}:latest:{{{_part(target)}}}:cluster"


CLUSTER_PROBE_TTL_MS = 60_000


def aggregator_restarts_key(target: str) -> str:
    """Hash of running totals of what the aggregator restarted for target cluster `target`: field
    `query` (its rollup query, after it failed or stalled; an older aggregator also counted `merge_child`,
    its window-merge child process, now gone). HINCRBY by the aggregator's supervisor; the service exposes
    them as Prometheus counters. No TTL: a counter that vanished would read as a reset."""
    return f"{PREFIX}:aggregator:{{{_part(target)}}}:restarts"


def rebuild_key(target: str) -> str:
    """Hash: the aggregator's last rebuild of target `target`'s rollups from Kafka, after it found its
    Redis state gone (flushed, or a new Redis) while its Spark checkpoint had progress. Fields (epoch ms
    as integer strings): `detected_ts` (when the loss was found), `checkpoint_kept` (where the old
    checkpoint was moved) and, once the rebuilt query's first batch is in, `history_from_ts` (the start
    of the earliest window Kafka still held: history before it is lost). The service shows it in the
    replications' status; it expires with the longest window retention, when the gap is out of range."""
    return f"{PREFIX}:aggregator:{{{_part(target)}}}:rebuild"


def offset_record_keys(target: str, raw_topic: str, kafka_partition: int) -> tuple[str, str]:
    """The two strings (hot, deep) in which the task of one Kafka partition of a raw-metrics topic keeps,
    from batch to batch, the recent offset windows of the partitions whose reports it judges
    (aggregator.offset_records: Arrow IPC, LZ4). Working state of the tasks, not an answer: what a reader
    wants is in the windows and latest values. One hash tag, so the task reads both in one MGET."""
    head = f"{PREFIX}:offrec:{{{_part(target)}|{_part(raw_topic)}}}:{int(kafka_partition)}"
    return f"{head}:hot", f"{head}:deep"


def written_record_key(target: str, raw_topic: str, kafka_partition: int) -> str:
    """The string in which the task of one Kafka partition of a raw-metrics topic keeps which latest-value
    and lag-verdict fields it wrote and the `ts` of each (aggregator.task_writes: Arrow IPC, LZ4), so that it
    writes them newest-wins itself. Working state of the tasks, cleared with the offset records."""
    return f"{PREFIX}:offrec:{{{_part(target)}|{_part(raw_topic)}}}:{int(kafka_partition)}:written"


def verdict_record_key(target: str, raw_topic: str, kafka_partition: int) -> str:
    """The string in which the task of one Kafka partition of a raw-metrics topic keeps the verdicts of its
    partitions as the columns their replications' summary reads (aggregator.task_verdicts: Arrow IPC, LZ4;
    their JSON is the lag_verdicts_key hash's). Working state of the tasks, cleared with the offset
    records."""
    return f"{PREFIX}:offrec:{{{_part(target)}|{_part(raw_topic)}}}:{int(kafka_partition)}:verdicts"


def verdict_parts_key(target: str) -> str:
    """Hash: field `<raw-metrics topic>|<Kafka partition>` -> the summary parts (contract.lag_verdicts
    .summary_parts) of each replication whose partitions that Kafka partition's task judges, as JSON
    (aggregator.task_verdicts), which the sink combines into each replication's summary (field `lag` of
    replication_status_key). Working state, cleared with the offset records."""
    return f"{PREFIX}:offrec:{{{_part(target)}|}}:verdict-parts"


OFFSET_RECORD_TTL_MS = INDEX_TTL_MS  # a record no task wrote for that long belongs to no live partition


def target_rollup_patterns(target: str, query_name: str) -> list[str]:
    """SCAN patterns of every key the rollup query `query_name` writes for `target` (series, indexes,
    latest values, record totals, its tasks' offset records, its exactly-once state), what a rebuild
    clears before it starts again.
    Not the aggregator's own keys (restart counts, the rebuild record, the cluster probe) nor the
    shared `targets_key()`."""
    tag = _glob_escape(_part(target))
    scope = _glob_escape(_part(query_name))
    return [f"{PREFIX}:wh:{{{tag}|*", f"{PREFIX}:win:{{{tag}|*", f"{PREFIX}:ts:{{{tag}|*",
            f"{PREFIX}:idx:{{{tag}|*",
            f"{PREFIX}:idx:{{{tag}}}:sources",
            f"{PREFIX}:latest:{{{tag}|*", f"{PREFIX}:invalid:{{{tag}|*", f"{PREFIX}:late:{{{tag}|*",
            f"{PREFIX}:refused:{{{tag}|*", f"{PREFIX}:offrec:{{{tag}|*",
            f"{PREFIX}:batch:{scope}", f"{PREFIX}:batch:{scope}{_glob_escape(_part(':'))}*"]


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def invalid_records_key(target: str, source: str) -> str:
    """Running total of raw records that did not parse, read from `srm-metrics.<source>.internal` in
    `target` (an integer string; same hash tag as the source's replication-level series)."""
    return f"{PREFIX}:invalid:{_tag(target, source, ALL_TOPICS)}:total"


def late_records_key(target: str, source: str) -> str:
    """Running total of valid raw records from `srm-metrics.<source>.internal` in `target` that came
    after the watermark had closed their window, so no rollup counts them (an integer string)."""
    return f"{PREFIX}:late:{_tag(target, source, ALL_TOPICS)}:total"


def subjects_key(target: str, source: str) -> str:
    """Sorted set of the replication's subjects the aggregator keeps series for (aggregator.subject_cap):
    member `<remote topic>|<partition>|<group>` (partition WHOLE_TOPIC for a whole topic, group empty
    but for a consumer group's), score = the hour (epoch ms) of its newest report."""
    return f"{PREFIX}:idx:{_tag(target, source, ALL_TOPICS)}:subjects"


def refused_subjects_key(target: str, source: str) -> str:
    """Running total of new subjects refused because the replication had as many as the aggregator keeps
    (aggregator.max.subjects.per.replication): one per subject and batch (an integer string)."""
    return f"{PREFIX}:refused:{_tag(target, source, ALL_TOPICS)}:subjects"


def encode_latest(value: dict) -> str:
    """Compact JSON, keys sorted. orjson: the sink encodes a few thousand a batch, ~7 us each with json.
    What orjson refuses (an integer past 64 bits, a key not a string) goes through json as before."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"), sort_keys=True)


def decode_latest(raw: str | bytes) -> dict:
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError(f"not a latest-value record: {raw!r}") from None
    if not isinstance(value, dict) or "ts" not in value:
        raise ValueError(f"not a latest-value record: {raw!r}")
    return value
