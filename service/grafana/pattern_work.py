"""The regex work of one request: bounded, charged against its point budget, and memoized.

Grafana sends patterns in targets, payload values and ad-hoc filters, and each ran once per target x
metric x subject x filter, outside any budget: a 225-byte query over 1,000 topics took 3.5 s. Here a
request compiles at most ``MAX_PATTERNS`` distinct patterns, each of at most ``MAX_PROGRAM_SIZE`` in
RE2's measure (past it RE2's DFA runs out of memory and falls back to a far slower engine), and every
compilation and every match of a (pattern, name) pair not seen before in the request costs
``1 + program size // PROGRAM_STEP`` points of ``service.max.points.per.request``, the budget reads of
stored windows spend too (``service.point_budget``). A pair seen before is answered from the
request's memo, free. Outside a request (tools, tests of pure rules) nothing is charged or kept.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Final

from flask import has_request_context

from clients.linear_regex import LinearPattern, PatternRefused, compile_user_pattern
from service import point_budget

MAX_PATTERNS: Final = 32
MAX_PROGRAM_SIZE: Final = 2_000
PROGRAM_STEP: Final = 100


@dataclass
class PatternWork:
    budget: point_budget.PointBudget
    compiled: dict[str, LinearPattern] = field(default_factory=dict)
    results: dict[tuple[str, str], bool] = field(default_factory=dict)


_WORK: ContextVar[PatternWork | None] = ContextVar("srm_pattern_work", default=None)


def _work() -> PatternWork:
    """This request's work, tied to its point budget (a new request has a new budget, so a new memo);
    outside a request, work of its own each time."""
    if not has_request_context():
        return PatternWork(point_budget.PointBudget(point_budget.DEFAULT_MAX_POINTS))
    budget = point_budget.current(point_budget.DEFAULT_MAX_POINTS)
    work = _WORK.get()
    if work is None or work.budget is not budget:
        work = PatternWork(budget)
        _WORK.set(work)
    return work


def cost(pattern: LinearPattern) -> int:
    return 1 + pattern.program_size // PROGRAM_STEP


def _charge(work: PatternWork, points: int, what: str) -> None:
    budget = work.budget
    if points > budget.left:
        raise point_budget.OverBudget(
            f"{what} would pass the limit of {budget.limit} points per request ({point_budget.SETTING}) "
            f"with {budget.spent} spent: regular expressions cost 1 point per name matched (more for "
            "larger patterns); use fewer or simpler patterns, or names")
    budget.spent += points


def compile_pattern(text: str, where: str) -> LinearPattern:
    """``text`` compiled on RE2 for this request; PatternRefused (naming ``where``) past the caps."""
    work = _work()
    found = work.compiled.get(text)
    if found is not None:
        return found
    if len(work.compiled) >= MAX_PATTERNS:
        raise PatternRefused(f"{where}: more than {MAX_PATTERNS} distinct patterns in one request")
    pattern = compile_user_pattern(text, where)
    if pattern.program_size > MAX_PROGRAM_SIZE:
        raise PatternRefused(f"{where}: pattern {text[:80]!r} compiles to a program of size "
                             f"{pattern.program_size}, over the limit of {MAX_PROGRAM_SIZE}; simplify it "
                             "(large counted repetitions such as .{1,100} are the usual cause)")
    _charge(work, cost(pattern), f"{where}: compiling pattern {text[:80]!r}")
    work.compiled[text] = pattern
    return pattern


def matches(pattern: LinearPattern, candidate: str) -> bool:
    """``pattern.fullmatch(candidate)``, each pair worked out once per request and charged."""
    work = _work()
    key = (pattern.text, candidate)
    found = work.results.get(key)
    if found is None:
        _charge(work, cost(pattern), f"matching pattern {pattern.text[:80]!r}")
        found = work.results[key] = pattern.fullmatch(candidate)
    return found
