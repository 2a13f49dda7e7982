"""The rules every parser of records and answers from outside follows: what is refused, and how it is shown.

Anyone with Produce rights on a topic we read, and anything that answers at a remote site's address,
can send us whatever bytes they like. A parser refuses what it cannot read with ``Rejected`` naming
what is wrong; the reader's guard (``clients.record_guard``) counts, logs and skips the record.

JSON from outside is parsed with orjson: its depth limit (1024) is a ``JSONDecodeError``, not a
``RecursionError``; it refuses ``NaN``, ``Infinity`` and ``1e400``; and whatever it parses serialises
again (integers beyond 64 bits come back as floats).
"""

from __future__ import annotations

import math
from typing import Any, Final

import orjson

SHOWN_CHARS: Final = 120


class Rejected(ValueError):
    """A record or answer refused on purpose; the message names what is wrong."""


def parse_json(raw: bytes | bytearray | memoryview | str | None, what: str) -> Any:
    """The JSON document in ``raw``, or ``Rejected`` naming ``what`` (missing, not UTF-8, nested deeper
    than 1024, NaN/Infinity, a number out of range, trailing bytes)."""
    if raw is None:
        raise Rejected(f"{what} is missing (null)")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Rejected(f"{what} is not JSON: {exc}") from None


def finite(value: object, what: str, low: float = -math.inf, high: float = math.inf) -> float:
    """``value`` as a float when it is a finite number in [low, high]; else ``Rejected`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected(f"{what} must be a number, not {shown(repr(value), 40)}")
    number = float(value) if isinstance(value, float) or abs(value) < 2**1023 else math.inf
    if not math.isfinite(number) or not low <= number <= high:
        raise Rejected(f"{what} {shown(repr(value), 40)} is not a finite number between {low:g} and {high:g}")
    return number


def long(value: object, what: str, low: int = -(2**63), high: int = 2**63 - 1) -> int:
    """``value`` when it is an integer (not a bool) in [low, high]; else ``Rejected`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Rejected(f"{what} must be an integer, not {shown(repr(value), 40)}")
    if not low <= value <= high:
        raise Rejected(f"{what} {shown(repr(value), 40)} is not between {low} and {high}")
    return value


def shown(text: str | bytes | bytearray | None, limit: int = SHOWN_CHARS) -> str:
    """``text`` fit for one log line: control characters and newlines escaped, cut at ``limit``
    characters, so data from outside can neither forge log lines nor flood them."""
    if text is None:
        return "null"
    if isinstance(text, bytes | bytearray):
        text = bytes(text[: limit * 4]).decode("utf-8", "backslashreplace")
    cut = text[:limit]
    escaped = "".join(c if c.isprintable() and c not in "\\" else _escape(c) for c in cut)
    return escaped + ("…" if len(text) > limit else "")


def _escape(char: str) -> str:
    if char == "\\":
        return "\\\\"
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}" if ord(char) < 65536
        else f"\\U{ord(char):08x}")
