"""Request schemas of the Grafana datasource and the answer shapes, documented as OpenAPI.

Requests follow Grafana's objects, which gain keys from version to version: every schema ignores
keys it does not know and every field is optional, so `{}` is a valid request everywhere.
The answer shapes are the simpod openapi.yaml ones with its three known schema bugs fixed (table rows
are arrays, datapoints may hold null, variable items carry `__text`/`__value`).
"""

from __future__ import annotations

from marshmallow import EXCLUDE, Schema, fields

from service.api.common import Timestamp


class Lenient(Schema):
    class Meta:
        unknown = EXCLUDE


class RangeSchema(Lenient):
    from_ms = Timestamp(data_key="from", metadata={"description": "ISO-8601 or epoch ms"})
    to_ms = Timestamp(data_key="to", metadata={"description": "ISO-8601 or epoch ms"})
    raw = fields.Raw()


class FilterSchema(Lenient):
    key = fields.String()
    operator = fields.String()
    value = fields.Raw()
    values = fields.List(fields.Raw())


class TargetSchema(Lenient):
    target = fields.String(
        allow_none=True,
        metadata={
            "description": "a metric name, `replication_status` (table) or `alerts` (annotations); "
            "several as `(a|b)` or a pattern (RE2, full match), one series per metric"
        },
    )
    refId = fields.String(allow_none=True)
    hide = fields.Boolean(allow_none=True)
    payload = fields.Raw(
        allow_none=True,
        metadata={
            "description": "source, target, topic, group: a name (maybe regex-escaped), a list, `(a|b)`, "
            "or a pattern (RE2, full match)"
        },
    )
    data = fields.Raw(allow_none=True, metadata={"description": "payload of simpod < 0.3 (legacy name)"})
    type = fields.String(allow_none=True)


class QuerySchema(Lenient):
    range = fields.Nested(RangeSchema)
    intervalMs = fields.Float(allow_none=True)
    maxDataPoints = fields.Float(allow_none=True)
    targets = fields.List(fields.Nested(TargetSchema))
    filters = fields.List(fields.Nested(FilterSchema))
    adhocFilters = fields.List(fields.Nested(FilterSchema))


class MetricsRequestSchema(Lenient):
    metric = fields.String(allow_none=True)
    payload = fields.Raw(allow_none=True)


class PayloadOptionsSchema(Lenient):
    metric = fields.String(allow_none=True)
    payload = fields.Raw(allow_none=True)
    name = fields.String(allow_none=True)


class VariableSchema(Lenient):
    payload = fields.Raw(
        allow_none=True,
        metadata={
            "description": "{target: '<what> key=value ...'} with what = clusters, targets, sources, topics, "
            "groups, metrics"
        },
    )
    range = fields.Nested(RangeSchema)


class TagValuesSchema(Lenient):
    key = fields.String(required=True)
    filters = fields.List(fields.Nested(FilterSchema))


class SearchSchema(Lenient):
    target = fields.String(allow_none=True)


class AnnotationsSchema(Lenient):
    range = fields.Nested(RangeSchema)
    annotation = fields.Raw(allow_none=True)


def _array(items: dict) -> dict:
    return {"type": "array", "items": items}


_STRING = {"type": "string"}
_OPTION = {"type": "object", "required": ["value"], "properties": {"label": _STRING, "value": _STRING}}
_CELL = {"nullable": True, "oneOf": [{"type": "string"}, {"type": "number"}]}
# Grafana's QueryResultMeta, notices only: what the service skipped (an ad-hoc operator it cannot
# apply), shown on the panel; toDataFrame copies `meta` into the frame.
_META = {
    "type": "object",
    "properties": {
        "notices": _array(
            {
                "type": "object",
                "required": ["severity", "text"],
                "properties": {
                    "severity": {"type": "string", "enum": ["info", "warning", "error"]},
                    "text": _STRING,
                },
            }
        )
    },
}
_TIMESERIE = {
    "type": "object",
    "required": ["target", "datapoints"],
    "properties": {
        "target": _STRING,
        "refId": _STRING,
        "tags": {"type": "object", "additionalProperties": _STRING},
        "meta": _META,
        "datapoints": _array(
            {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "number", "nullable": True}}
        ),
    },
}
_TABLE = {
    "type": "object",
    "required": ["type", "columns", "rows"],
    "properties": {
        "type": {"type": "string", "enum": ["table"]},
        "refId": _STRING,
        "columns": _array(
            {"type": "object", "required": ["text"], "properties": {"text": _STRING, "type": _STRING}}
        ),
        "rows": _array(_array(_CELL)),
        "meta": _META,
    },
}
_PAYLOAD = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": _STRING,
        "label": _STRING,
        "type": {"type": "string", "enum": ["select", "multi-select", "input"]},
        "placeholder": _STRING,
        "reloadMetric": {"type": "boolean"},
        "options": _array(_OPTION),
    },
}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ANSWERS = {
    "health": _json({"type": "object", "properties": {"status": _STRING}}, "Datasource reachable"),
    "metrics": _json(
        _array(
            {
                "type": "object",
                "required": ["value", "payloads"],
                "properties": {"label": _STRING, "value": _STRING, "payloads": _array(_PAYLOAD)},
            }
        ),
        "Metrics and their payloads",
    ),
    "options": _json(_array(_OPTION), "Options of one payload"),
    "query": _json(_array({"anyOf": [_TIMESERIE, _TABLE]}), "Time series and tables"),
    "variable": _json(
        _array(
            {
                "type": "object",
                "required": ["__text", "__value"],
                "properties": {"__text": _STRING, "__value": _STRING},
            }
        ),
        "Variable values",
    ),
    "tag_keys": _json(
        _array({"type": "object", "properties": {"type": _STRING, "text": _STRING}}), "Filter keys"
    ),
    "tag_values": _json(_array({"type": "object", "properties": {"text": _STRING}}), "Filter values"),
    "search": _json(_array(_STRING), "Metric names (legacy simple-json)"),
    "annotations": _json(
        _array(
            {
                "type": "object",
                "properties": {
                    "annotation": {"type": "object"},
                    "time": {"type": "integer"},
                    "timeEnd": {"type": "integer"},
                    "title": _STRING,
                    "text": _STRING,
                    "tags": _array(_STRING),
                },
            }
        ),
        "Annotations (legacy simple-json)",
    ),
}
