"""Which subjects a target selects: its payload values and Grafana's ad-hoc filters.

Ad-hoc filters arrive as ``{key, operator, value}`` (or ``values`` for the multi operators), written
by Grafana itself and never regex-formatted by the plugin. The operators Grafana's filter bar offers
(``=  !=  =|  !=|  =~  !~  <  >``) all apply here, and ``<=`` ``>=`` too. An operator the service
cannot apply is skipped with a notice the panel shows, never a failed panel: newer Grafana versions
add operators, and one filter must not blank a whole dashboard. Patterns run on RE2
(``clients.linear_regex``), never on Python's ``re``.
"""

from __future__ import annotations

import math
import operator as op
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from clients.linear_regex import PatternRefused
from service.grafana.pattern_work import compile_pattern
from service.grafana.queries import FILTER_KEYS, QueryError, Subject
from service.grafana.variable_values import (
    MAX_VALUES,
    NestedObject,
    RefusedValue,
    Selector,
    scalar_text,
    selector_of,
)

EQUALITY = ("=", "!=", "=|", "!=|", "=~", "!~")
ORDERING = ("<", ">", "<=", ">=")
_NUMERIC = frozenset("0123456789+-.eE")
MAX_FILTERS = 64  # ad-hoc filters of one query: Grafana's filter bar holds a handful


@dataclass(frozen=True)
class Filter:
    """One constraint on one key: a selector (``=``/``!=``, negated by ``!``) or an ordering bound."""

    key: str
    operator: str
    selector: Selector | None = None
    bound: str | None = None

    @classmethod
    def equal(cls, key: str, *values: str) -> Filter:
        return cls(key, "=", Selector(frozenset(values)))

    def accepts(self, subject: Subject) -> bool:
        if self.bound is not None:
            # Ordering compares the upstream topic, the name /tag-values offers: the remote name
            # `east.orders` would otherwise put every topic of `east` below `p`.
            candidates = _candidates(subject, self.key, remote=False)
            return not candidates or any(ordered(c, self.operator, self.bound) for c in candidates)
        candidates = _candidates(subject, self.key, remote=True)
        if not candidates or self.selector is None:
            return True  # a filter on a key this subject does not have cannot exclude it
        hit = any(self.selector.matches(c) for c in candidates)
        return not hit if self.operator.startswith("!") else hit


_COMPARISONS: Final = {"<": op.lt, ">": op.gt, "<=": op.le}  # and >= for the rest of ORDERING


def ordered(candidate: str, operator: str, bound: str) -> bool:
    """``candidate <operator> bound``: numerically when both are numbers, else as text."""
    a, b = _number(candidate), _number(bound)
    compare = _COMPARISONS.get(operator, op.ge)
    return bool(compare(a, b) if a is not None and b is not None else compare(candidate, bound))


def _number(text: str) -> float | None:
    if not text or not set(text) <= _NUMERIC:  # float() would also take "1_0", " 7 " and "nan"
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _candidates(subject: Subject, key: str, remote: bool) -> set[str]:
    if key == "topic":
        names = (subject.topic, subject.upstream_topic) if remote else (subject.upstream_topic,)
        return {t for t in names if t}
    value = getattr(subject, key, None) if key in FILTER_KEYS else None
    return {value} if value else set()


def filters_of(raw: Iterable[object]) -> tuple[list[Filter], list[str]]:
    """Grafana's ad-hoc filters (``filters``, or ``adhocFilters`` before plugin 0.6.4) and the notices
    for those skipped. Filters on keys we do not know are skipped silently: they belong to other
    datasources of the dashboard."""
    found: list[Filter] = []
    notices: list[str] = []
    raw = list(raw)
    if len(raw) > MAX_FILTERS:
        raise QueryError(f"filters: {len(raw)} filters, over the limit of {MAX_FILTERS} per query")
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            notices.append(f"filters[{i}]: not a filter object, ignored")
            continue
        key, operator = item.get("key"), item.get("operator") or "="
        if key not in FILTER_KEYS:
            continue
        if not isinstance(operator, str):
            notices.append(f"filters[{i}].operator: not a string, filter on {key} ignored")
            continue
        values = _values(item, multi=operator in ("=|", "!=|"))
        if values is None:
            notices.append(f"filters[{i}]: the value of the filter on {key} is not text, ignored")
            continue
        shown = ",".join(values)
        if operator in ("=", "!=", "=|", "!=|"):
            found.append(Filter(key, operator, Selector(frozenset(values))))
        elif operator in ("=~", "!~"):
            try:
                patterns = tuple(compile_pattern(v, f"filters[{i}].value") for v in values)
            except PatternRefused as refused:
                raise QueryError(str(refused)) from None
            found.append(Filter(key, operator, Selector(patterns=patterns)))
        elif operator in ORDERING and len(values) == 1:
            found.append(Filter(key, operator, bound=values[0]))
        else:
            notices.append(
                f"filter {key} {operator} {shown}: operator {operator!r} not supported here, ignored"
            )
    return found, notices


def _values(item: Mapping, multi: bool) -> list[str] | None:
    values = item.get("values")
    raw = values if multi and isinstance(values, list) else [item.get("value", "")]
    if len(raw) > MAX_VALUES:
        raise QueryError(f"the filter on {item.get('key')} has {len(raw)} values, over the limit of "
                         f"{MAX_VALUES}")
    texts = [t for t in map(scalar_text, raw) if t is not None]
    return texts if len(texts) == len(raw) else None


def payload_filters(
    payload: object, where: str = "payload", notices: list[str] | None = None
) -> list[Filter]:
    """A payload's keys as filters. Values come as the plugin formats them (``variable_values``): a
    name, an escaped name, an alternation, a list, or a pattern; all-values markers select all."""
    if not isinstance(payload, Mapping):
        return []
    found = []
    for key in FILTER_KEYS:
        try:
            selector = selector_of(payload.get(key), f"{where}.{key}")
        except NestedObject as nested:
            if notices is not None:
                notices.append(f"{nested}; ignored")
            continue
        except RefusedValue as refused:
            raise QueryError(str(refused)) from None
        if selector is not None:
            found.append(Filter(key, "=", selector))
    return found


def select(subjects: Iterable[Subject], filters: Sequence[Filter]) -> list[Subject]:
    return [s for s in subjects if all(f.accepts(s) for f in filters)]
