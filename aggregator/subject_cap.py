"""Subjects per replication, capped: a writer of `srm-metrics.<src>.internal` can name any topic, partition
and group, and each new name is a new set of series (windows at every size, latest values, index entries).
A replication keeps at most `aggregator.max.subjects.per.replication` subjects; a new one beyond that is
refused: none of its windows or latest values are written, and the refusal is counted
(layout.refused_subjects_key, `srm_subjects_refused_total` at /metrics) and logged, at most once a minute
a replication.

A subject is a remote topic-partition, a whole remote topic, or a consumer group's topic-partition or
topic (a member `<topic>|<partition>|<group>`, redis_layout.subjects_key); the replication as a whole is
not one and is never refused. Its records still count in the replication-wide series, whose number does
not grow with them.

A subject is known while it reports: each has the hour of its newest event ts (redis_layout.subjects_key,
written in the batch's MULTI), and one not seen for FORGET_AFTER_MS of the replication's clock (the newest
such hour) is forgotten, so deleted topics free their room. Decisions depend only on the subjects Redis
holds before the batch and on the batch itself: a batch Spark replays after a crash refuses the same
subjects, in whichever process. Within a batch new subjects are taken in name order (`admit`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import redis

from aggregator.window_partials import BatchPartials, window_starts
from contract import redis_layout as layout
from contract.replication_policy import metrics_topic

LOG = logging.getLogger(__name__)

HOUR_MS = 3_600_000
# Longer than any report period or a driver down overnight; short enough that topics deleted and
# created (a test cluster's churn) do not fill the cap.
FORGET_AFTER_MS = 24 * HOUR_MS
LOG_EVERY_S = 60.0
Replication = tuple[str, str]  # target, source
_SUBJECT_COLUMNS = ["target", "source", "topic", "partition", "group"]


def admit(known: Collection[str], new: Iterable[str], cap: int) -> tuple[list[str], list[str]]:
    """The rule: of the subjects `new` not in `known`, those that fit under `cap` with the known ones
    are admitted, in name order, the rest refused (admitted, refused). The order is the names', not the
    records': a batch replayed after a crash, its partitions read by other tasks, refuses the same."""
    fresh = sorted({subject for subject in new if subject not in known})
    room = max(cap - len(known), 0)
    return fresh[:room], fresh[room:]


def member(topic: str, partition: int, group: str | None) -> str:
    """A subject as redis_layout.subjects_key names it (topics hold no `|`; the group, which may, last)."""
    return f"{topic}|{partition}|{group or ''}"


@dataclass
class KnownSubjects:
    """One replication's subjects as Redis holds them: member -> hour of its newest event ts."""

    hours: dict[str, int] = field(default_factory=dict)
    clock: int = 0  # the newest hour
    floor: int = 0  # no hour is below it (the least one, or less)
    current: set[str] = field(default_factory=set)  # the members at the clock's hour: most of a batch's

    @classmethod
    def of(cls, hours: dict[str, int]) -> KnownSubjects:
        clock = max(hours.values(), default=0)
        return cls(hours, clock, min(hours.values(), default=0), {m for m, h in hours.items() if h == clock})


@dataclass
class Decision:
    """What one batch does to one replication's subjects (decide): applied to KnownSubjects once the
    batch is committed, queued to Redis in its MULTI."""

    replication: Replication
    refreshed: dict[str, int]  # known subjects seen at a newer hour
    forget_before: int | None  # subjects whose hour is older are forgotten (after the refresh)
    forgotten: list[str]
    admitted: dict[str, int]
    refused: list[str]
    looked_for_old: bool = False  # every known subject's hour was read: the floor is known anew


def decide(replication: Replication, known: KnownSubjects, seen: Mapping[str, int], cap: int,
           forget_after_ms: int = FORGET_AFTER_MS) -> Decision:
    """Pure: the batch's subjects `seen` (member -> hour) against the `known` ones: the known seen at a newer
    hour are refreshed, the clock moves to the newest known hour, the known ones older than the clock
    less `forget_after_ms` are forgotten, and then new subjects are admitted under `cap` (admit)."""
    hours = known.hours
    # Most of a batch is known at the clock's hour: a set difference (in C) leaves those out, unless the
    # batch reaches past the clock.
    if not seen:
        others: Iterable[str] = ()
    elif max(seen.values()) > known.clock:
        others = seen.keys()
    else:
        others = seen.keys() - known.current
    refreshed, new = {}, []
    for m in others:
        stored = hours.get(m)
        if stored is None:
            new.append(m)
        elif seen[m] > stored:
            refreshed[m] = seen[m]
    clock = max(known.clock, max(refreshed.values(), default=known.clock))
    forget_before, forgotten = clock - forget_after_ms, []
    looked = known.floor < forget_before  # seldom: at an hour's turn at most
    if looked:
        forgotten = [m for m, h in hours.items() if refreshed.get(m, h) < forget_before]
    left = set(forgotten)
    known_after = hours.keys() - left if left else hours.keys()
    admitted, refused = admit(known_after, new, cap)
    return Decision(replication, refreshed, forget_before if forgotten else None, forgotten,
                    {m: seen[m] for m in admitted}, refused, looked)


def apply(known: KnownSubjects, decision: Decision) -> None:
    """`decision` made part of `known` (its batch committed)."""
    hours = known.hours
    was_empty = not hours
    hours.update(decision.refreshed)
    for m in decision.forgotten:
        del hours[m]
    hours.update(decision.admitted)
    changed = (*decision.refreshed.values(), *decision.admitted.values())
    clock = max(known.clock, *changed) if changed else known.clock
    if clock > known.clock:  # an hour's turn: the members at the new hour, from all (once an hour)
        known.clock = clock
        known.current = {m for m, h in hours.items() if h == clock}
    else:
        known.current.difference_update(decision.forgotten)
        # A subject refreshed with an hour already past the forget horizon is forgotten in the same batch.
        known.current.update(m for m in (*decision.refreshed, *decision.admitted) if hours.get(m) == clock)
    if decision.looked_for_old or was_empty:
        known.floor = min(hours.values(), default=0)
    elif decision.admitted:
        known.floor = min(known.floor, *decision.admitted.values())


def seen_subjects(windows: pa.Table) -> dict[Replication, dict[str, int]]:
    """The subjects of a batch's partial windows (window_partials), per replication: member -> hour of
    its newest event ts. The replication-wide rows (topic ALL_TOPICS, invalid records' too) name none."""
    rows = windows.select([*_SUBJECT_COLUMNS, "max_ts", "window_start"])
    rows = rows.filter(pc.not_equal(rows["topic"], layout.ALL_TOPICS))
    if rows.num_rows == 0:
        return {}
    newest = rows.append_column("ts", pc.coalesce(rows["max_ts"], rows["window_start"])) \
        .group_by(_SUBJECT_COLUMNS, use_threads=False).aggregate([("ts", "max")])
    members = pc.binary_join_element_wise(newest["topic"], pc.cast(newest["partition"], pa.string()),
                                          pc.fill_null(newest["group"], ""), "|")
    table = pa.table({"target": newest["target"], "source": newest["source"], "member": members,
                      "hour": window_starts(newest["ts_max"], HOUR_MS)})
    out: dict[Replication, dict[str, int]] = {}
    for target, source in _pairs(table):
        mine = table.filter(pc.and_(pc.equal(table["target"], target), pc.equal(table["source"], source)))
        out[(target, source)] = dict(zip(mine["member"].to_pylist(), mine["hour"].to_pylist(), strict=True))
    return out


def _pairs(table: pa.Table) -> list[Replication]:
    pairs = table.select(["target", "source"]).group_by(["target", "source"], use_threads=False).aggregate([])
    return sorted(zip(pairs["target"].to_pylist(), pairs["source"].to_pylist(), strict=True))


def without(batch: BatchPartials, refused: Mapping[Replication, Collection[str]]) -> BatchPartials:
    """`batch` without the windows and latest records of the `refused` subjects."""
    keys = pa.array(sorted(f"{t}|{s}|{m}" for (t, s), members in refused.items() for m in members),
                    pa.string())

    def kept(rows: pa.Table) -> pa.Table:
        row_keys = pc.binary_join_element_wise(rows["target"], rows["source"], rows["topic"],
                                               pc.cast(rows["partition"], pa.string()),
                                               pc.fill_null(rows["group"], ""), "|")
        return rows.filter(pc.invert(pc.is_in(row_keys, value_set=keys)))

    values, verdicts = batch.values, batch.verdicts
    if values is not None and verdicts is not None:
        values, verdicts = _judged_without(values, verdicts, refused)
    return BatchPartials(kept(batch.windows), kept(batch.latest), batch.excerpts, batch.late, values,
                         verdicts)


def _judged_without(values: pa.Table, verdicts: pa.Table, refused: Mapping[Replication, Collection[str]]
                    ) -> tuple[pa.Table, pa.Table]:
    """The tasks' latest values and verdicts (offset_records) without those of the `refused` subjects (the
    values, the fields left to the driver to write, hold verdicts too)."""
    value_fields, verdict_fields = [], []
    for (target, source), members in refused.items():
        for member in members:
            topic, partition, group = member.split("|", 2)
            if group:
                key, name = layout.group_latest_key(target, source, group), f"{topic}|{partition}"
            else:
                key, name = layout.partition_latest_key(target, source, topic), partition
                verdict_fields.append(f"{target}\x00{source}\x00{topic}|{partition}")
                # its verdict, among the fields left to the driver to write (offset_records.verdict_values)
                value_fields.append(f"{layout.lag_verdicts_key(target, source)}\x00{topic}|{partition}")
            value_fields.append(f"{key}\x00{name}")

    def kept(rows: pa.Table, columns: list[str], refused_keys: list[str]) -> pa.Table:
        row_keys = pc.binary_join_element_wise(*(rows[c] for c in columns), "\x00")
        return rows.filter(pc.invert(pc.is_in(row_keys, value_set=pa.array(refused_keys, pa.string()))))

    return (kept(values, ["key", "field"], value_fields),
            kept(verdicts, ["target", "source", "field"], verdict_fields))


class SubjectBook:
    """The sink's view of every replication's subjects (one target's): loaded from Redis when a batch
    first names the replication, changed only by committed batches, dropped when a batch fails."""

    def __init__(self, cap: int, query_name: str) -> None:
        self.cap = cap
        self.query_name = query_name
        self.known: dict[Replication, KnownSubjects] = {}
        self._pending: list[Decision] = []
        self._unlogged: dict[Replication, int] = {}  # refusals since the replication's last log line
        self._logged_at: dict[Replication, float] = {}

    def screen(self, client: redis.Redis, batch: BatchPartials) -> BatchPartials:
        """`batch` without the subjects the cap refuses; what it does is queued (queue) for the commit."""
        seen = seen_subjects(batch.windows)
        self._load(client, [r for r in seen if r not in self.known])
        self._pending = [decide(r, self.known[r], subjects, self.cap) for r, subjects in seen.items()]
        refused = {d.replication: set(d.refused) for d in self._pending if d.refused}
        return without(batch, refused) if refused else batch

    def _load(self, client: redis.Redis, replications: list[Replication]) -> None:
        if not replications:
            return
        pipe = client.pipeline(transaction=False)
        for target, source in replications:
            pipe.zrange(layout.subjects_key(target, source), 0, -1, withscores=True)
        for replication, stored in zip(replications, pipe.execute(), strict=True):
            self.known[replication] = KnownSubjects.of({m.decode(): int(h) for m, h in stored})

    def queue(self, pipe: redis.client.Pipeline, batch_id: int) -> None:
        """The batch's decisions, into its MULTI; the refusals logged."""
        for d in self._pending:
            key = layout.subjects_key(*d.replication)
            if d.refreshed:
                pipe.zadd(key, d.refreshed)
            if d.forget_before is not None:
                pipe.zremrangebyscore(key, "-inf", f"({d.forget_before}")
            if d.admitted:
                pipe.zadd(key, d.admitted)
            if d.refreshed or d.admitted:
                pipe.pexpire(key, layout.INDEX_TTL_MS)
            if d.refused:
                total = layout.refused_subjects_key(*d.replication)
                pipe.incrby(total, len(d.refused))
                pipe.pexpire(total, layout.INDEX_TTL_MS)
                self._log(d, batch_id)

    def committed(self) -> None:
        for d in self._pending:
            apply(self.known[d.replication], d)
        self._pending = []

    def clear(self) -> None:
        """Forgets what it knew: Redis may not hold it (a failed batch, a flush); read again when needed."""
        self.known.clear()
        self._pending = []

    def _log(self, decision: Decision, batch_id: int) -> None:
        replication = decision.replication
        self._unlogged[replication] = self._unlogged.get(replication, 0) + len(decision.refused)
        now = time.monotonic()
        if now - self._logged_at.get(replication, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        target, source = replication
        topic, partition, group = decision.refused[0].split("|", 2)
        LOG.warning("%s: %s is at its cap of %d subjects (aggregator.max.subjects.per.replication): %d new "
                    "subject(s) from %s refused in batch %d, %d since the last such line; first: topic %r "
                    "partition %s%s", self.query_name, f"{source}->{target}", self.cap, len(decision.refused),
                    metrics_topic(source), batch_id, self._unlogged[replication], topic, partition,
                    f" group {group!r}" if group else "")
        self._unlogged[replication] = 0
        self._logged_at[replication] = now
