"""Argument and answer schemas of the checkpointed-groups resource."""

from __future__ import annotations

from marshmallow import Schema, fields

from service.api.common import MetricSeriesSchema, TimeRangeArgs
from service.api.replications.schemas import GroupStatusSchema


class GroupMetricArgs(TimeRangeArgs):
    topic = fields.String(metadata={"description": "upstream topic to restrict to (default: all topics)"})


class GroupListSchema(Schema):
    source = fields.String()
    target = fields.String()
    groups = fields.List(fields.Nested(GroupStatusSchema))


class GroupMetricSchema(MetricSeriesSchema):
    source = fields.String()
    target = fields.String()
    group = fields.String()
    upstreamTopic = fields.String(allow_none=True)
    from_ms = fields.Integer(data_key="from")
    to_ms = fields.Integer(data_key="to")
