"""Which topics and consumer groups a replication copies: MM2 regex filters plus srm-control lists."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Set
from typing import TYPE_CHECKING, Final

from clients.linear_regex import PatternRefused, compile_user_pattern
from contract.replication_policy import ReplicationPolicy, is_cycle
from contract.settings import default_of
from contract.untrusted import shown

if TYPE_CHECKING:
    from contract.config import SrmConfig

LOG = logging.getLogger(__name__)

DEFAULT_TOPICS: Final[tuple[str, ...]] = default_of("topics", tuple)
DEFAULT_TOPICS_EXCLUDE: Final[tuple[str, ...]] = default_of("topics.exclude", tuple)
DEFAULT_GROUPS: Final[tuple[str, ...]] = default_of("groups", tuple)
DEFAULT_GROUPS_EXCLUDE: Final[tuple[str, ...]] = default_of("groups.exclude", tuple)
MAX_PATTERN_CHARS: Final = 256
"""An srm-control entry longer than this is a name, never a pattern: no topic name is longer than 249
characters, and each pattern is compiled and run for every name a replication looks at."""
MEMO_NAMES: Final = 100_000  # answers one list version remembers before it starts afresh
_PLAIN: Final = re.compile(r"[\w-]+")  # an entry that means the same as a name and as a pattern
_WARNED_MAX: Final = 4096


class PatternList:
    """A list of regexes matched against whole names; MM2 compatible (an empty list matches nothing).

    Matching any one pattern fully is what MM2's ``"|".join`` of the list does, without the surprises
    of joining patterns that carry their own flags.
    """

    def __init__(self, patterns: Iterable[str], setting: str) -> None:
        self.patterns = tuple(patterns)
        self._compiled = tuple(_compile(pattern, setting) for pattern in self.patterns)

    def __repr__(self) -> str:
        return f"PatternList({list(self.patterns)!r})"

    def matches(self, name: str) -> bool:
        return any(pattern.fullmatch(name) for pattern in self._compiled)


def _compile(pattern: str, setting: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{setting}: invalid regular expression {pattern!r}: {exc}") from exc


class TopicFilter:
    """MM2 ``DefaultTopicFilter``: ``topics`` minus ``topics.exclude``; exclude wins."""

    def __init__(
        self, include: Iterable[str] = DEFAULT_TOPICS, exclude: Iterable[str] = DEFAULT_TOPICS_EXCLUDE
    ) -> None:
        self.include = PatternList(include, "topics")
        self.exclude = PatternList(exclude, "topics.exclude")

    def __repr__(self) -> str:
        return (
            f"TopicFilter(include={list(self.include.patterns)!r}, exclude={list(self.exclude.patterns)!r})"
        )

    def should_replicate_topic(self, topic: str) -> bool:
        return self.include.matches(topic) and not self.exclude.matches(topic)


class GroupFilter:
    """MM2 ``DefaultGroupFilter``: ``groups`` minus ``groups.exclude``; exclude wins."""

    def __init__(
        self, include: Iterable[str] = DEFAULT_GROUPS, exclude: Iterable[str] = DEFAULT_GROUPS_EXCLUDE
    ) -> None:
        self.include = PatternList(include, "groups")
        self.exclude = PatternList(exclude, "groups.exclude")

    def __repr__(self) -> str:
        return (
            f"GroupFilter(include={list(self.include.patterns)!r}, exclude={list(self.exclude.patterns)!r})"
        )

    def should_replicate_group(self, group: str) -> bool:
        return self.include.matches(group) and not self.exclude.matches(group)


def topic_filter_for(config: SrmConfig, source: str, target: str) -> TopicFilter:
    """The topic filter of replication ``source -> target``; a bad regex is a ConfigError at its line."""
    include = _setting_patterns(config, "topics", source, target)
    exclude = _setting_patterns(config, "topics.exclude", source, target)
    return TopicFilter(include, exclude)


def group_filter_for(config: SrmConfig, source: str, target: str) -> GroupFilter:
    """The group filter of replication ``source -> target``; a bad regex is a ConfigError at its line."""
    include = _setting_patterns(config, "groups", source, target)
    exclude = _setting_patterns(config, "groups.exclude", source, target)
    return GroupFilter(include, exclude)


def _setting_patterns(config: SrmConfig, key: str, source: str, target: str) -> tuple[str, ...]:
    patterns = tuple(config.setting(key, source, target))
    try:
        PatternList(patterns, key)
    except ValueError as exc:
        raise config.config_error(key, str(exc), source, target) from exc
    return patterns


def should_replicate_topic(
    topic: str,
    topic_filter: TopicFilter,
    policy: ReplicationPolicy,
    target_alias: str,
    heartbeats_replication: bool = True,
    allow: Set[str] = frozenset(),
    deny: Set[str] = frozenset(),
) -> bool:
    """MM2 topic eligibility combined with the live srm-control allow and deny lists.

    MM2 compatible core: (filter accepts it OR it is a heartbeats topic and heartbeats replication is
    on) AND it is not internal AND replicating it would not be a cycle.

    Our srm-control semantics (SRM-style allow/deny lists; each entry is a topic name or a regex that
    must match the whole name):
    - the allow list adds topics on top of the configured filter, even ones ``topics.exclude`` rejects;
    - the deny list wins over the filter, the allow list and heartbeats: an operator who names a topic
      on the deny list means it;
    - neither list can make an internal topic or a cycle eligible, those would corrupt the replication.
    """
    if policy.is_internal_topic(topic) or is_cycle(policy, topic, target_alias):
        return False
    if _listed(topic, deny):
        return False
    if _listed(topic, allow) or topic_filter.should_replicate_topic(topic):
        return True
    return heartbeats_replication and policy.is_heartbeats_topic(topic)


def should_replicate_group(
    group: str, group_filter: GroupFilter, allow: Set[str] = frozenset(), deny: Set[str] = frozenset()
) -> bool:
    """Group eligibility: the MM2 group filter plus srm-control lists, with the topic rules above."""
    if _listed(group, deny):
        return False
    return _listed(group, allow) or group_filter.should_replicate_group(group)


def _listed(name: str, entries: Set[str]) -> bool:
    if not entries:
        return False
    listed = entries if isinstance(entries, ListedNames) else ListedNames(entries)
    return listed.matches(name)


class ListedNames(frozenset[str]):
    """One version of an srm-control list: its entries (a frozenset, for printing and comparing) with
    their matching prepared once. Plain names go in a set, patterns are compiled on first use, and
    every name's answer is remembered: a refresh of thousands of topics under a list of a thousand
    entries matches each name once per version, not once per entry and refresh.

    Entries come from a topic anyone with Produce rights may write, so patterns run on RE2 (linear
    time: ``(.+)+X`` cannot stall a replication). An entry RE2 refuses (not a regex, backreferences,
    longer than ``MAX_PATTERN_CHARS``) only matches itself."""

    _patterns: tuple[Callable[[str], bool], ...] | None  # full-match tests of the non-plain entries
    _memo: dict[str, bool]

    def __new__(cls, entries: Iterable[str] = ()) -> ListedNames:
        listed = super().__new__(cls, entries)
        listed._patterns, listed._memo = None, {}
        return listed

    def matches(self, name: str) -> bool:
        known = self._memo.get(name)
        if known is None:
            patterns = self._patterns if self._patterns is not None else self._compile()
            plain_hit = name in self and _PLAIN.fullmatch(name) is not None
            known = plain_hit or any(fullmatch(name) for fullmatch in patterns)
            if len(self._memo) >= MEMO_NAMES:
                self._memo.clear()
            self._memo[name] = known
        return known

    def _compile(self) -> tuple[Callable[[str], bool], ...]:
        patterns: list[Callable[[str], bool]] = []
        for entry in self:
            if _PLAIN.fullmatch(entry):
                continue
            try:
                pattern = compile_user_pattern(entry, "srm-control entry", max_length=MAX_PATTERN_CHARS)
                patterns.append(pattern.fullmatch)
            except PatternRefused as exc:  # a typo in the lists must not stop the replication
                patterns.append(entry.__eq__)
                _warn_once(entry, str(exc))
        self._patterns = tuple(patterns)
        return self._patterns


_warned: set[str] = set()


def _warn_once(entry: str, problem: str) -> None:
    if entry in _warned:
        return
    if len(_warned) >= _WARNED_MAX:
        _warned.clear()
    _warned.add(entry)
    LOG.warning("%s; matching it literally", shown(problem, 300))


class FoundAtStart:
    """MM2's `refresh.topics.enabled` / `refresh.groups.enabled` = false: the names the first look-up
    found stay the scope for good; later look-ups can only drop names (deleted, denied), never add."""

    def __init__(self, refresh: bool) -> None:
        self.refresh = refresh
        self._first: frozenset[str] | None = None

    def keep(self, names: Iterable[str]) -> list[str]:
        found = list(names)
        if self.refresh:
            return found
        if self._first is None:
            self._first = frozenset(found)
        return [name for name in found if name in self._first]
