"""Reading a Java .properties file into entries that remember their line, and parsing setting values.

`contract.config` builds the SRM settings on top of this; errors here already name the file and line.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Final

import javaproperties

LOG = logging.getLogger(__name__)

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


class ConfigError(Exception):
    """A configuration problem; ``str()`` names the file, the line (when known) and the key."""

    def __init__(self, message: str, *, source_name: str, line: int | None = None, key: str | None = None):
        self.message = message
        self.source_name = source_name
        self.line = line
        self.key = key
        where = source_name if line is None else f"{source_name}:{line}"
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")


@dataclass(frozen=True)
class PropertyEntry:
    value: str
    line: int


def read_entries(text: str, source_name: str) -> dict[str, PropertyEntry]:
    """Key -> value and the line it starts on; a repeated key keeps its last value, as in Java."""
    entries: dict[str, PropertyEntry] = {}
    line = 1
    try:
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                if element.key in entries:
                    LOG.warning("%s:%d: %s repeats line %d; the last value wins (as in Java)",
                                source_name, line, element.key, entries[element.key].line)  # fmt: skip
                entries[element.key] = PropertyEntry(element.value, line)
            line += len(_LINE_BREAK.findall(element.source))
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"invalid \\u escape {exc.escape!r}", source_name=source_name, line=line) from None
    return entries


def split_list(value: str) -> list[str]:
    """Comma-separated values, trimmed, empty items dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def parse_int(text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ValueError(text)
    return int(text)


def parse_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(text)
    return number
