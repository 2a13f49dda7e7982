"""Values as the simpod plugin sends them, decoded into the set of names they select.

The plugin passes targets and builder payloads through Grafana's ``regex`` variable format, so what
arrives is not always the name the user picked:

- a multi-value variable arrives as an alternation, ``(orders|payments)``;
- a single value arrives regex-escaped, ``my\\.topic``; Grafana has two escapers (scenes'
  ``escapeRegex`` and the legacy ``escapeStringForRegex``, which also escapes ``-``), so
  ``audit\\-log`` happens too;
- a custom "All" value (``.*``) arrives as written, a real pattern.

``selector_of`` reads a value back: an escaped literal means that name, an alternation of escaped
literals means that set, a plain Kafka-legal name (letters, digits, ``.``, ``_``, ``-``) means itself
even with its dots (option lists and code-mode JSON send names unformatted), and anything else is a
pattern run on RE2 (``clients.linear_regex``), full match, or refused with a message naming where it
came from. Every reading agrees with what the value means as an anchored regex, except the plain name,
whose dots stay dots.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from clients.linear_regex import LinearPattern, PatternRefused
from service.grafana.pattern_work import compile_pattern, matches

ALL_VALUES = ("", "$__all", "*", "All")
"""Values that put no constraint on a key: unset, Grafana's all marker, and the old catch-alls."""

_META = frozenset("\\^$*+?.()[]{}|")
_ESCAPABLE = frozenset(string.punctuation)
_LEGAL_NAME = frozenset(string.ascii_letters + string.digits + "._-")
NESTED_OBJECT = "[object Object]"  # what the plugin's toString() makes of a nested payload object
MAX_VALUES = 1_000  # names in one list or alternation: a dashboard variable offers fewer


class RefusedValue(ValueError):
    """A value that is neither a name, a set of names, nor a pattern RE2 accepts."""


class NestedObject(RefusedValue):
    """A nested object where a name was expected (the plugin sends it as ``[object Object]``)."""


@dataclass(frozen=True)
class Selector:
    """The names a value selects: a set of literals and patterns (any of them may match)."""

    literals: frozenset[str] = frozenset()
    patterns: tuple[LinearPattern, ...] = ()

    def matches(self, candidate: str) -> bool:
        return candidate in self.literals or any(matches(p, candidate) for p in self.patterns)

    def union(self, other: Selector) -> Selector:
        return Selector(self.literals | other.literals, self.patterns + other.patterns)

    def describe(self) -> str:
        parts = [repr(v) for v in sorted(self.literals)] + [f"pattern {p.text!r}" for p in self.patterns]
        return ", ".join(parts) or "nothing"


def scalar_text(value: object) -> str | None:
    """A JSON scalar as the plugin's ``toString()`` writes it; None for objects and arrays."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def selector_of(raw: object, where: str) -> Selector | None:
    """The selector a payload value or target stands for; None when it selects everything.

    Raises ``NestedObject`` or ``RefusedValue`` (a pattern RE2 refuses), both naming ``where``."""
    if raw is None:
        return None
    if isinstance(raw, list):
        if not raw:
            return None
        if len(raw) > MAX_VALUES:
            raise RefusedValue(f"{where}: {len(raw)} values, over the limit of {MAX_VALUES}")
        literals: set[str] = set()
        patterns: list[LinearPattern] = []
        for i, item in enumerate(raw):  # built once: a union per item copied the set each time
            one = selector_of(item, f"{where}[{i}]")
            if one is None:
                return None  # one "all" in a list selects everything
            literals |= one.literals
            patterns += one.patterns
        return Selector(frozenset(literals), tuple(dict.fromkeys(patterns)))
    text = scalar_text(raw)
    if text is None or text == NESTED_OBJECT:
        raise NestedObject(f"{where}: a name, a list of names or a pattern was expected, not an object")
    if text in ALL_VALUES:
        return None
    if set(text) <= _LEGAL_NAME:
        return Selector(frozenset({text}))
    names = _alternation(text) if text.startswith("(") and text.endswith(")") else None
    if names is None:
        literal = _unescaped(text)
        names = None if literal is None else [literal]
    if names is not None:
        if len(names) > MAX_VALUES:
            raise RefusedValue(f"{where}: {len(names)} names, over the limit of {MAX_VALUES}")
        return Selector(frozenset(names))
    try:
        return Selector(patterns=(compile_pattern(text, where),))
    except PatternRefused as refused:
        raise RefusedValue(str(refused)) from None


def _tokens(text: str) -> list[tuple[str, bool]] | None:
    """(character, escaped) pairs; None when a backslash escapes something that is not punctuation
    (``\\d``, ``\\w``: classes, not literals) or ends the text."""
    tokens: list[tuple[str, bool]] = []
    i = 0
    while i < len(text):
        if text[i] == "\\":
            if i + 1 == len(text) or text[i + 1] not in _ESCAPABLE:
                return None
            tokens.append((text[i + 1], True))
            i += 2
        else:
            tokens.append((text[i], False))
            i += 1
    return tokens


def _unescaped(text: str) -> str | None:
    """The literal an escaped value stands for, or None if it has an unescaped metacharacter."""
    tokens = _tokens(text)
    if tokens is None or any(c in _META and not escaped for c, escaped in tokens):
        return None
    return "".join(c for c, _ in tokens)


def _alternation(text: str) -> list[str] | None:
    """``(a|b\\.c|d)`` -> ``['a', 'b.c', 'd']``; None unless every branch is an escaped literal."""
    tokens = _tokens(text[1:-1])
    if tokens is None:
        return None
    names: list[str] = []
    current: list[str] = []
    for c, escaped in tokens:
        if c == "|" and not escaped:
            names.append("".join(current))
            current = []
        elif c in _META and not escaped:
            return None
        else:
            current.append(c)
    return [*names, "".join(current)]
