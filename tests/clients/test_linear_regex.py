"""clients/linear_regex.py: user patterns run on RE2 with a cap and a clear refusal, never on ``re``."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, cast

import pytest

from clients import linear_regex
from clients.linear_regex import MAX_PATTERN_LENGTH, PatternRefused, compile_user_pattern


def test_full_match_semantics() -> None:
    pattern = compile_user_pattern("ord.*")
    assert pattern.fullmatch("orders")
    assert not pattern.fullmatch("xorders")  # anchored at the start
    assert not compile_user_pattern("ord").fullmatch("orders")  # and at the end
    assert compile_user_pattern("(orders|payments)").fullmatch("payments")
    assert compile_user_pattern(r"my\.topic").fullmatch("my.topic")
    assert not compile_user_pattern(r"my\.topic").fullmatch("myXtopic")


def test_case_sensitivity_is_the_callers_choice() -> None:
    assert not compile_user_pattern("ORDERS").fullmatch("orders")
    assert compile_user_pattern("ORDERS", case_sensitive=False).fullmatch("orders")


def test_catastrophic_pattern_answers_in_linear_time() -> None:
    """``(.+)+X`` against 30 characters takes Python's ``re`` minutes; RE2 answers at once."""
    pattern = compile_user_pattern("(.+)+X")
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(pattern.fullmatch("a" * 100_000)), daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=5)
    assert answers == [False], "the match did not finish within 5 s"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", r"invalid escape sequence: \1"),
        ("a(?=b)", "invalid perl operator: (?="),
        ("(", "missing ): ("),
        ("a{1000}{1000}", "bad repetition operator"),
    ],
)
def test_refusal_names_the_input_the_pattern_and_the_reason(pattern: str, reason: str) -> None:
    with pytest.raises(PatternRefused) as refused:
        compile_user_pattern(pattern, "filters[0].value")
    message = str(refused.value)
    assert message.startswith(f"filters[0].value: pattern {pattern!r} refused: not a pattern RE2 accepts")
    assert reason in message
    assert "no backreferences or lookaround" in message


def test_length_cap() -> None:
    compile_user_pattern("a" * MAX_PATTERN_LENGTH)
    with pytest.raises(PatternRefused, match=r"^payload\.topic: pattern 'a{80}…' is 513 characters long; "
                       r"patterns are capped at 512$"):
        compile_user_pattern("a" * (MAX_PATTERN_LENGTH + 1), "payload.topic")
    # A caller with longer legitimate patterns (a topic list in a config file) raises its own cap.
    assert compile_user_pattern("b" * 2000, max_length=4096).fullmatch("b" * 2000)


def test_not_a_string_and_lone_surrogates() -> None:
    with pytest.raises(PatternRefused, match=r"^topics: a pattern must be a string, not int$"):
        compile_user_pattern(cast(Any, 7), "topics")
    with pytest.raises(PatternRefused, match="lone surrogate"):
        compile_user_pattern("a\ud800")
    assert not compile_user_pattern(".*").fullmatch("\ud800")  # matched as no match, not a crash


def test_without_re2_every_pattern_is_refused_never_run_on_re(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linear_regex, "_re2", None)
    linear_regex._compile.cache_clear()
    try:
        assert not linear_regex.engine_available()
        with pytest.raises(PatternRefused, match=r"^x: pattern 'ord\.\*' refused: .*package google-re2"):
            compile_user_pattern("ord.*", "x")
    finally:
        linear_regex._compile.cache_clear()


def test_the_module_does_not_use_python_re() -> None:
    source = open(linear_regex.__file__, encoding="utf-8").read()
    assert "import re\n" not in source and "from re " not in source
    assert linear_regex.engine_available() and "re2" in sys.modules
