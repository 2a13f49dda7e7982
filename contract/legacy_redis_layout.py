"""The Redis window layouts before the current one (a hash a subject and window size): read only to move
them (aggregator.window_layout_upgrade), never written.

First a series was one sorted set per metric, `srm:ts:{target|source|topic}:<partition>:<group>:<metric>:
<window>`, member `<start>:<count>:<sum>:<min>:<max>:<last>[:<last ts>]`. Key parts are escaped as the
current layout escapes them (redis_layout's one definition). Then a subject's windows at one size were a
sorted set (`srm:win:…`, sorted_series_key), members as today, scored by their start.
"""

from __future__ import annotations

from urllib.parse import unquote

from contract.redis_layout import PREFIX, WINDOWS, SeriesId, WindowAggregate, _glob_escape, _part, _tag


def legacy_series_key(series: SeriesId, window: str) -> str:
    """A series' sorted set before one set held all of a subject's metrics: member
    `<start>:<count>:<sum>:<min>:<max>:<last>[:<last ts>]`."""
    group = "" if series.group is None else _part(series.group)
    return (f"{PREFIX}:ts:{_tag(series.target, series.source, series.topic)}:{series.partition}:"
            f"{group}:{_part(series.metric)}:{window}")


def legacy_target_pattern(target: str) -> str:
    """SCAN pattern of every legacy_series_key of `target` (and of no other target)."""
    return f"{PREFIX}:ts:{{{_glob_escape(_part(target))}|*"


def parse_legacy_series_key(key: str | bytes) -> tuple[SeriesId, str]:
    """(series, window) named by a legacy_series_key; ValueError when `key` is not one. A key that does
    not come back as itself from legacy_series_key is refused, so two keys never read as one series."""
    text = key.decode() if isinstance(key, bytes) else key
    head = f"{PREFIX}:ts:{{"
    try:
        if not text.startswith(head):
            raise ValueError(text)
        # '}' inside a part is escaped by _part: the first one closes the tag.
        tag, _, rest = text[len(head):].partition("}:")
        target, source, topic = (unquote(x) for x in tag.split("|"))
        partition, group, metric, window = rest.split(":")
        series = SeriesId(target, source, topic, int(partition), unquote(metric),
                          unquote(group) if group else None)
    except ValueError:
        raise ValueError(f"not a legacy series key: {text!r}") from None
    if window not in WINDOWS or legacy_series_key(series, window) != text:
        raise ValueError(f"not a legacy series key: {text!r}")
    return series, window


def decode_legacy_member(member: str | bytes) -> WindowAggregate:
    text = member.decode() if isinstance(member, bytes) else member
    parts = text.split(":")
    try:
        if len(parts) not in (6, 7):
            raise ValueError(text)
        start, count, total, low, high, last = parts[:6]
        last_ts = int(parts[6]) if len(parts) == 7 else None
        return WindowAggregate(int(start), float(count), float(total), float(low), float(high), float(last),
                               last_ts)
    except ValueError:
        raise ValueError(f"not a window member: {text!r}") from None


def sorted_series_key(series: SeriesId, window: str) -> str:
    """A subject's windows at one size before they moved into a hash (redis_layout.series_key): a sorted
    set, score = window start, member = the window's member as redis_layout.encode_member writes it."""
    group = "" if series.group is None else _part(series.group)
    tag = _tag(series.target, series.source, series.topic)
    return f"{PREFIX}:win:{tag}:{series.partition}:{group}:{window}"


def sorted_target_pattern(target: str) -> str:
    """SCAN pattern of every sorted_series_key of `target` (and of no other target)."""
    return f"{PREFIX}:win:{{{_glob_escape(_part(target))}|*"


def parse_sorted_series_key(key: str | bytes) -> tuple[SeriesId, str]:
    """(subject, window) named by a sorted_series_key (the SeriesId's metric empty); ValueError when `key`
    is not one, or not as sorted_series_key writes it."""
    text = key.decode() if isinstance(key, bytes) else key
    head = f"{PREFIX}:win:{{"
    try:
        if not text.startswith(head):
            raise ValueError(text)
        tag, _, rest = text[len(head):].partition("}:")
        target, source, topic = (unquote(x) for x in tag.split("|"))
        partition, group, window = rest.split(":")
        series = SeriesId(target, source, topic, int(partition), "", unquote(group) if group else None)
    except ValueError:
        raise ValueError(f"not a sorted-set series key: {text!r}") from None
    if window not in WINDOWS or sorted_series_key(series, window) != text:
        raise ValueError(f"not a sorted-set series key: {text!r}")
    return series, window
