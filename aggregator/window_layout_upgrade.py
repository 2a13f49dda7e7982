"""Moves a target's windows from the layouts before (contract.legacy_redis_layout) into the current one.

The service reads only the current layout (redis_layout.series_key: a hash a subject and window size), but
the old keys hold up to 90 days of 1 h windows: the supervisor runs this once per target at process start,
before the target's query writes (its writer keeps what it wrote in memory, so nothing may change its keys
behind it). The oldest layout moves first into the one after it, which then moves into the current one.

A subject's oldest keys at one window size (one per metric) become one member per window start in its
sorted set (the layout after), merged with what that already holds at that start
(redis_layout.merge_windows); a subject's sorted set becomes its hash, a field a window, merged the same
way with what the hash holds. Each group
moves in one MULTI that WATCHes every key it reads, so a concurrent writer aborts it and it is read and
moved again; memory holds one group at a time. A member that does not decode is logged, counted and left
out; a key the layout cannot name (not a legacy key, or a metric without a place in WINDOW_METRICS) is
logged and left where it is. Once moved, the old keys are gone: a second run finds nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import cast

import redis

from clients import redis_connection
from contract import legacy_redis_layout as legacy
from contract import redis_layout as layout
from contract.redis_layout import SeriesId, WindowAggregate

LOG = logging.getLogger(__name__)

SCAN_COUNT = 1000
# A group aborted this many times in a row (something keeps writing its keys) fails the upgrade: the
# caller tries again later rather than this spinning.
WATCH_ATTEMPTS = 10
SHOWN_CHARS = 200  # of an unreadable member in its warning: a corrupt member may be huge

Windows = dict[int, dict[str, WindowAggregate]]  # window start -> metric -> its window


@dataclass
class UpgradeCounts:
    keys_moved: int = 0  # old keys moved and deleted (either layout before)
    windows_written: int = 0  # windows written into the current layout (a subject, window size and start)
    members_skipped: int = 0  # members that did not decode, left out
    keys_skipped: int = 0  # old keys left in place: not named as the layout names them

    @property
    def anything(self) -> bool:
        return any((self.keys_moved, self.windows_written, self.members_skipped, self.keys_skipped))


@dataclass
class _Move:
    """One group's move, read under WATCH: what the MULTI writes."""

    old_keys: list[str]  # the group's old keys that exist
    replaced: list[bytes]  # new-key members merged into (or unreadable at) a moved start
    windows: Windows
    ttl_ms: int | None  # None: a key had no expiry, so the new one keeps none
    skipped: int


def upgrade_target(redis_url: str, target: str) -> UpgradeCounts:
    """upgrade_windows on a client of its own; says what it did in one INFO line (nothing when there was
    nothing to move). Raises redis.RedisError when Redis failed it: the caller tries again."""
    client = redis_connection.connect(redis_url)
    try:
        counts = upgrade_windows(client, target)
    finally:
        client.close()
    if counts.anything:
        LOG.info("target %s: %d windows moved from the Redis layouts before (sorted sets; %d keys) into "
                 "the current one (a hash a subject and window size); %d unreadable members left out, %d "
                 "unreadable keys left in place", target, counts.windows_written, counts.keys_moved,
                 counts.members_skipped, counts.keys_skipped)
    return counts


def upgrade_windows(client: redis.Redis, target: str) -> UpgradeCounts:
    counts = UpgradeCounts()
    _upgrade_metric_sets(client, target, counts)
    for key in client.scan_iter(match=legacy.sorted_target_pattern(target), count=SCAN_COUNT):
        try:
            series, window = legacy.parse_sorted_series_key(key)
        except ValueError as exc:
            LOG.warning("layout upgrade: %s; left in place", exc)
            counts.keys_skipped += 1
            continue
        _move_sorted(client, key.decode(), layout.series_key(series, window), counts)
    return counts


def _upgrade_metric_sets(client: redis.Redis, target: str, counts: UpgradeCounts) -> None:
    """The oldest layout (a sorted set a metric) into the sorted sets a subject."""
    # A group is moved at the first of its keys SCAN returns; the rest are gone by the time they come
    # (or read as empty if SCAN returns them anyway), so no set of groups done is kept.
    for key in client.scan_iter(match=legacy.legacy_target_pattern(target), count=SCAN_COUNT):
        group = _group_of(key, counts)
        if group is not None:
            _move_group(client, *group, counts)


def _group_of(key: bytes, counts: UpgradeCounts) -> tuple[SeriesId, str] | None:
    """(subject, window) of an old key; None for a key this upgrade cannot move (logged, counted)."""
    try:
        series, window = legacy.parse_legacy_series_key(key)
    except ValueError as exc:
        LOG.warning("layout upgrade: %s; left in place", exc)
        counts.keys_skipped += 1
        return None
    if series.metric not in layout.METRIC_INDEX:
        LOG.warning("layout upgrade: %s holds metric %r, which the current layout has no place for; left "
                    "in place", key.decode(errors="replace"), series.metric)
        counts.keys_skipped += 1
        return None
    return series, window


def _move_group(client: redis.Redis, series: SeriesId, window: str, counts: UpgradeCounts) -> None:
    # Every metric's old key of the subject, existing or not: the group is whole without listing keys.
    old_keys = [legacy.legacy_series_key(replace(series, metric=m), window) for m in layout.WINDOW_METRICS]
    new_key = legacy.sorted_series_key(series, window)
    with client.pipeline(transaction=True) as pipe:
        for _ in range(WATCH_ATTEMPTS):
            try:
                pipe.watch(new_key, *old_keys)
                move = _read_group(client, new_key, old_keys)
                if move is None:
                    pipe.unwatch()
                    return
                _write_group(pipe, new_key, move)
            except redis.WatchError:
                continue
            counts.keys_moved += len(move.old_keys)
            counts.members_skipped += move.skipped
            return
    raise redis.WatchError(f"layout upgrade: {new_key} kept changing while its old keys were moved")


def _read_group(client: redis.Redis, new_key: str, old_keys: list[str]) -> _Move | None:
    """The group's move, read in one round trip (another connection: reads do not touch the WATCH);
    None when none of its old keys exists."""
    reads = client.pipeline(transaction=False)
    for key in old_keys:
        reads.zrange(key, 0, -1)
        reads.pttl(key)
    reads.zrange(new_key, 0, -1, withscores=True)
    reads.pttl(new_key)
    *old, new_members, new_ttl = reads.execute()
    # PTTL -2: no such key (an empty sorted set does not exist).
    present = [(metric, key, members, ttl) for metric, key, members, ttl
               in zip(layout.WINDOW_METRICS, old_keys, old[::2], old[1::2], strict=True) if ttl != -2]
    if not present:
        return None
    windows: Windows = {}
    skipped = 0
    for metric, key, members, _ in present:
        for member in members:
            agg = _legacy_window(key, member)
            if agg is None:
                skipped += 1
            else:
                _add(windows.setdefault(agg.start_ms, {}), metric, agg)
    replaced, unreadable = _merge_new(new_key, new_members, windows)
    ttls = [ttl for *_, ttl in present] + ([new_ttl] if new_ttl != -2 else [])
    ttl_ms = None if -1 in ttls else max(ttls)
    return _Move([key for _, key, _, _ in present], replaced, windows, ttl_ms, skipped + unreadable)


def _legacy_window(key: str, member: bytes) -> WindowAggregate | None:
    try:
        agg = legacy.decode_legacy_member(member)
    except ValueError:
        agg = None
    # A window without a sample would make a member decode_member refuses: as unreadable as a bad one.
    if agg is None or not agg.count > 0:
        LOG.warning("layout upgrade: %s holds a member that is not a window, left out: %r", key,
                    member[:SHOWN_CHARS])
        return None
    return agg


def _add(metrics: dict[str, WindowAggregate], metric: str, agg: WindowAggregate) -> None:
    known = metrics.get(metric)
    metrics[metric] = agg if known is None else layout.merge_windows(known, agg)


def _merge_new(new_key: str, members: list[tuple[bytes, float]], windows: Windows) -> tuple[list[bytes], int]:
    """Merges the new key's members at the moved starts into `windows`; returns the members they replace
    and how many of those did not decode (replaced too: two members at one start would read as one
    window counted twice)."""
    replaced, unreadable = [], 0
    for member, score in members:
        start = int(score)
        if start not in windows:
            continue
        replaced.append(member)
        try:
            _, metrics = layout.decode_member(member)
        except ValueError:
            LOG.warning("layout upgrade: %s holds a member that is not a window, replaced: %r", new_key,
                        member[:SHOWN_CHARS])
            unreadable += 1
            continue
        for metric, agg in metrics.items():
            _add(windows[start], metric, replace(agg, start_ms=start))
    return replaced, unreadable


def _write_group(pipe: redis.client.Pipeline, new_key: str, move: _Move) -> None:
    """One MULTI: the group's windows into the new key, its old keys gone, the longer expiry kept."""
    pipe.multi()
    if move.replaced:
        pipe.zrem(new_key, *move.replaced)
    if move.windows:
        pipe.zadd(new_key, {layout.encode_member(start, metrics): start
                            for start, metrics in move.windows.items()})
    pipe.delete(*move.old_keys)
    # PTTL was read before the MULTI, so the expiry set now is no earlier than the one it was read from.
    if move.ttl_ms is None:
        pipe.persist(new_key)
    else:
        pipe.pexpire(new_key, max(move.ttl_ms, 1))
    pipe.execute()


def _merge_member(windows: Windows, start: int, member: bytes, key: str, fate: str) -> bool:
    """`member` (a window of `key` at `start`) merged into `windows`; False, logged, when it is not one."""
    try:
        _, metrics = layout.decode_member(member)
    except ValueError:
        LOG.warning("layout upgrade: %s holds a member that is not a window, %s: %r",
                    key, fate, member[:SHOWN_CHARS])
        return False
    for metric, agg in metrics.items():
        _add(windows.setdefault(start, {}), metric, replace(agg, start_ms=start))
    return True


def _move_sorted(client: redis.Redis, old_key: str, new_key: str, counts: UpgradeCounts) -> None:
    """One subject's sorted set (at one window size) into its hash, in one MULTI WATCHing both."""
    with client.pipeline(transaction=True) as pipe:
        for _ in range(WATCH_ATTEMPTS):
            try:
                pipe.watch(old_key, new_key)
                reads = client.pipeline(transaction=False)
                reads.zrange(old_key, 0, -1, withscores=True)
                reads.pttl(old_key)
                reads.pttl(new_key)
                reads.hget(new_key, layout.NEWEST_FIELD)
                members, old_ttl, new_ttl, newest = reads.execute()
                if old_ttl == -2:  # gone meanwhile (SCAN may return a key twice)
                    pipe.unwatch()
                    return
                windows: Windows = {}
                skipped = 0
                for member, score in members:
                    skipped += not _merge_member(windows, int(score), member, old_key, "left out")
                held = cast(list, client.hmget(new_key, [str(start) for start in windows])) if windows else []
                for start, raw in zip(list(windows), held, strict=True):
                    if raw is not None:
                        skipped += not _merge_member(windows, start, raw, new_key, "replaced")
                ttls = [old_ttl] + ([new_ttl] if new_ttl != -2 else [])
                pipe.multi()
                if windows:
                    last = max(windows)
                    known = int(newest) if newest is not None and newest.isdigit() else None
                    fields = {str(start): layout.encode_member(start, metrics)
                              for start, metrics in windows.items()}
                    if known is None or known < last:
                        fields[layout.NEWEST_FIELD] = str(last)
                    pipe.hset(new_key, mapping=fields)
                    if -1 in ttls:
                        pipe.persist(new_key)
                    else:
                        pipe.pexpire(new_key, max(max(ttls), 1))
                pipe.delete(old_key)
                pipe.execute()
            except redis.WatchError:
                continue
            counts.keys_moved += 1
            counts.windows_written += len(windows)
            counts.members_skipped += skipped
            return
    raise redis.WatchError(f"layout upgrade: {new_key} kept changing while {old_key} was moved")
