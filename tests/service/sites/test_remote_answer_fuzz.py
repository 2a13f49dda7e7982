"""Random and adversarial remote answers into the gateway's answer handling (hypothesis).

The property: ``parse_answer`` returns (body, is_json) for any bytes or refuses it with CallFailed;
whatever it parses, and whatever ``tagged`` makes of a Grafana answer, serialises again with orjson,
so one site's answer can never turn the merged answer into a 500. (Found here: a body nested 300 deep
parsed, but orjson writes at most 254 levels.)
"""

from __future__ import annotations

import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.sites.gateway import SiteAnswer, answer_of, merge_answers
from service.sites.grafana_site_answers import tagged
from service.sites.remote_call import CallFailed, parse_answer

EXAMPLES = int(os.environ.get("SRM_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# What orjson.loads can give: integers from -2**63 to 2**64 - 1 (beyond: floats), finite floats.
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
JSON = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=40)

_FRAME_KEYS = st.sampled_from(["type", "columns", "rows", "target", "datapoints", "tags", "meta", "text"])
FRAMES = st.lists(st.one_of(
    JSON,
    st.dictionaries(_FRAME_KEYS, JSON, max_size=6),
    st.fixed_dictionaries({"type": st.just("table"), "columns": JSON, "rows": JSON}),
    st.fixed_dictionaries({"target": JSON, "datapoints": JSON, "tags": JSON}),
), max_size=6)

_ADVERSARIAL = st.one_of(
    st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 400).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.integers(1, 3000).map(lambda n: b'{"a":' * n),
    st.integers(20, 400).map(lambda n: b"[1" + b"0" * n + b"]"),
    st.sampled_from([b"NaN", b"[Infinity]", b"1e999", b'"\\ud800"', b"\xff\xfe", b"", b"null"]),
)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)  # raises when the merged answer could not be sent


@FUZZ
@given(st.one_of(st.binary(max_size=2048), _ADVERSARIAL, JSON.map(orjson.dumps)))
def test_any_answer_parses_or_is_refused_and_the_merge_serialises(data: bytes):
    try:
        body, is_json = parse_answer(data)
    except CallFailed as refused:
        assert refused.status == "error: answer nested deeper than 64 levels"
        return
    assert is_json or body is None
    status = answer_of("east", "u", 200, body, is_json, 1.0)
    _dumps(merge_answers([status, SiteAnswer("west", "ok", body=[{"a": 1}])]))


@FUZZ
@given(FRAMES)
def test_tagged_keeps_only_well_formed_frames_and_they_serialise(frames: list):
    result = tagged("east", frames)
    _dumps(result)
    for frame in result:
        if frame.get("type") == "table":
            assert frame["columns"][0] == {"text": "Site", "type": "string"}
            assert all(isinstance(row, list) and row[0] == "east" for row in frame["rows"])
            assert all(cell is None or isinstance(cell, str | int | float) and not isinstance(cell, bool)
                       for row in frame["rows"] for cell in row)
            assert set(frame) <= {"type", "columns", "rows", "refId", "meta"}
        else:
            assert frame["tags"]["site"] == "east" and frame["target"].startswith("east: ")
            assert all(isinstance(value, str) for value in frame["tags"].values())
            assert set(frame) <= {"target", "datapoints", "tags", "refId", "meta"}


@FUZZ
@given(JSON)
def test_tagged_of_anything_parsed_never_raises(value: Any):
    _dumps(tagged("east", value))


def test_an_answer_orjson_parses_but_cannot_write_is_refused():
    deep = b"[" * 300 + b"]" * 300
    try:
        parse_answer(deep)
    except CallFailed as refused:
        assert not refused.breaks
    else:
        raise AssertionError("a body nested 300 deep was accepted")
    assert parse_answer(b"[" * 60 + b"]" * 60)[1]
