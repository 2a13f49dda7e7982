"""Schemas shared by the resources: the time-range arguments and the metric answer."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime

import orjson
from flask import Response
from flask_smorest import abort
from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from contract.redis_layout import WINDOWS
from service.metric_summary import MetricSeries
from service.metrics_reader import NotFound

DEFAULT_RANGE_MS = 2 * 3_600_000  # SRM convention: metrics default to the last two hours
# ASCII digits only: str.isdigit() also accepts characters such as '²' that int() refuses.
EPOCH_MS = re.compile(r"-?[0-9]{1,18}")


class Timestamp(fields.Field):
    """Epoch milliseconds or an ISO-8601 date-time (UTC when it names no zone)."""

    def _deserialize(self, value, attr, data, **kwargs) -> int:
        text = str(value).strip()
        if EPOCH_MS.fullmatch(text):
            return int(text)
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return int(parsed.timestamp() * 1000)
        except (ValueError, OverflowError):
            raise ValidationError("expected epoch milliseconds or an ISO-8601 date-time") from None


def with_default_range(data: dict) -> dict:
    data.setdefault("to_ms", int(time.time() * 1000))
    data.setdefault("from_ms", data["to_ms"] - DEFAULT_RANGE_MS)
    return data


class TimeRangeArgs(Schema):
    from_ms = Timestamp(data_key="from", metadata={
        "description": "Range start: epoch ms or ISO-8601 (default: `to` minus 2 hours)",
        "example": "2026-11-22T10:00:00Z"})
    to_ms = Timestamp(data_key="to", metadata={
        "description": "Range end: epoch ms or ISO-8601 (default: now)"})
    granularity = fields.String(load_default="auto", validate=validate.OneOf([*WINDOWS, "auto"]),
                                metadata={"description": "Window size of the series points"})

    @post_load
    def fill_defaults(self, data: dict, **_: object) -> dict:
        return with_default_range(data)

    @validates_schema
    def ordered(self, data: dict, **_: object) -> None:
        if "from_ms" in data and "to_ms" in data and data["from_ms"] > data["to_ms"]:
            raise ValidationError("`from` must not be after `to`", field_name="from")


GRANULARITIES = frozenset([*WINDOWS, "auto"])


def plain_time_range(query: Mapping[str, str]) -> dict | None:
    """TimeRangeArgs' load of the common query, without marshmallow: the same rules on the same first
    values (webargs reads a repeated parameter's first), for epoch-ms bounds in order and a known or
    absent granularity. None for anything else (an ISO date-time, an error), which the schema loads
    and, when it is wrong, words the 400 of: one set of rules, the schema's, for every other input."""
    granularity = query.get("granularity", "auto")
    if granularity not in GRANULARITIES:
        return None
    bounds: dict[str, int] = {}
    for name, key in (("from", "from_ms"), ("to", "to_ms")):
        value = query.get(name)
        if value is not None:
            text = value.strip()
            if not EPOCH_MS.fullmatch(text):
                return None
            bounds[key] = int(text)
    if "from_ms" in bounds and "to_ms" in bounds and bounds["from_ms"] > bounds["to_ms"]:
        return None
    return with_default_range({"granularity": granularity, **bounds})


class PointSchema(Schema):
    ts = fields.Integer(metadata={"description": "window start, epoch ms"})
    value = fields.Float()
    min = fields.Float()
    max = fields.Float()
    avg = fields.Float()
    sum = fields.Float()
    count = fields.Float(metadata={"description": "samples (reports or records) in the window"})


class MetricSeriesSchema(Schema):
    metric = fields.String()
    granularity = fields.String()
    value = fields.Float(allow_none=True, metadata={"description": "the metric over the whole range"})
    min = fields.Float(allow_none=True)
    max = fields.Float(allow_none=True)
    avg = fields.Float(allow_none=True)
    sum = fields.Float(allow_none=True)
    count = fields.Float()
    series = fields.List(fields.Nested(PointSchema))


def metric_response(identity: dict, answer: MetricSeries) -> Response:
    return json_response(metric_body(identity, answer))


def metric_body(identity: dict, answer: MetricSeries) -> dict:
    """The metric answer as MetricSeriesSchema documents it, for orjson to write directly.

    Metric answers are the hot path (a dashboard asks for hundreds of series): building the JSON by
    hand instead of through marshmallow and dataclasses.asdict takes most of a request's CPU time off;
    orjson writes the points (dataclasses) itself, several times faster than json.dumps.
    """
    return {**identity, "metric": answer.metric, "granularity": answer.granularity, "value": answer.value,
            "min": answer.min, "max": answer.max, "avg": answer.avg, "sum": answer.sum, "count": answer.count,
            "series": answer.series}


def json_response(body: object) -> Response:
    """A ready JSON answer (flask-smorest passes a Response through untouched)."""
    return Response(orjson.dumps(body), mimetype="application/json")


@contextmanager
def unknown_answers_404() -> Iterator[None]:
    """Lookups of clusters, topics, groups and metrics inside answer 404 naming what is unknown."""
    try:
        yield
    except NotFound as exc:
        abort(404, message=str(exc))
