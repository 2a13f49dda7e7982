"""Patterns written by users, run on a linear-time engine (RE2), never on Python's ``re``.

A pattern that comes from outside (a Grafana variable, an ad-hoc filter, a REST parameter, a topic
list in a properties file) must not be able to stall a process: Python's ``re`` backtracks, so
``(.+)+X`` against a long name takes exponential time. RE2 (package ``google-re2``) matches in time
linear in the text and refuses what it cannot do that way (backreferences, lookaround). This module
is the one door to it: a length cap, fixed RE2 options, full-match semantics (as Java's
``Matcher.matches`` in MirrorMaker 2 and Grafana's anchored filters), a bounded cache, and a
``PatternRefused`` error whose message names the pattern and why. There is no fallback to ``re``:
without RE2 every pattern is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

try:
    import re2 as _re2
except ImportError:  # the wheel exists for the usual platforms; elsewhere patterns are refused, not slow
    _re2 = None

MAX_PATTERN_LENGTH: Final = 512
"""Longest pattern accepted unless the caller asks for another cap: compiling is linear too, but a
200 000-branch alternation still takes a tenth of a second, which a request should not buy."""

_MAX_MEM: Final = 1 << 20
"""RE2's memory budget per pattern (program + DFA cache). Past it, compilation fails or matching
falls back to RE2's NFA, still linear; with the cache below this bounds the total."""

_SHOWN: Final = 80  # characters of a refused pattern quoted in the message


class PatternRefused(ValueError):
    """A user pattern the linear-time engine will not run; the message names the pattern and why."""


@dataclass(frozen=True, slots=True)
class LinearPattern:
    """A compiled user pattern; ``fullmatch`` is true when the pattern matches the whole text."""

    text: str
    _compiled: Any

    @property
    def program_size(self) -> int:
        """RE2's measure of the compiled program: what one match costs grows with it."""
        return int(self._compiled.programsize)

    def fullmatch(self, candidate: str) -> bool:
        try:
            return self._compiled.fullmatch(candidate) is not None
        except UnicodeEncodeError:
            # A lone surrogate cannot be UTF-8 for RE2, and no Kafka or Redis name contains one.
            return False


def engine_available() -> bool:
    """Whether RE2 is installed (it is a dependency; this is for messages and tests)."""
    return _re2 is not None


def compile_user_pattern(
    pattern: str, what: str = "pattern", *, max_length: int = MAX_PATTERN_LENGTH, case_sensitive: bool = True
) -> LinearPattern:
    """Compile ``pattern`` on RE2, or raise ``PatternRefused`` with a message starting with ``what``.

    ``what`` says where the pattern came from (``filters[0].value``, ``topics.exclude``), so the
    message tells the user which of their inputs to fix.
    """
    if not isinstance(pattern, str):
        raise PatternRefused(f"{what}: a pattern must be a string, not {type(pattern).__name__}")
    if len(pattern) > max_length:
        raise PatternRefused(
            f"{what}: pattern {_shown(pattern)} is {len(pattern)} characters long; "
            f"patterns are capped at {max_length}"
        )
    compiled, problem = _compile(pattern, case_sensitive)
    if problem is not None:
        raise PatternRefused(f"{what}: pattern {_shown(pattern)} refused: {problem}")
    return LinearPattern(pattern, compiled)


@lru_cache(maxsize=128)
def _compile(pattern: str, case_sensitive: bool) -> tuple[Any, str | None]:
    """The compiled pattern, or the reason it is refused (both cached: a refused pattern sent in a
    loop costs one compilation)."""
    if _re2 is None:
        return None, "regular expressions need the RE2 engine (package google-re2), which is not installed"
    options = _re2.Options()
    options.max_mem = _MAX_MEM
    options.log_errors = False  # refused user patterns are answered, not logged to stderr
    options.never_capture = True  # only match or no match is asked; no group bookkeeping
    options.case_sensitive = case_sensitive
    try:
        return _re2.compile(pattern, options), None
    except UnicodeEncodeError:
        return None, "not valid Unicode text (it contains a lone surrogate)"
    except _re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return None, (
            f"not a pattern RE2 accepts ({reason}); RE2 matches in linear time and so has no "
            "backreferences or lookaround"
        )


def _shown(pattern: str) -> str:
    return repr(pattern if len(pattern) <= _SHOWN else pattern[:_SHOWN] + "…")
