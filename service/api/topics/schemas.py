"""Answer schemas of the topic-metrics resource."""

from __future__ import annotations

from marshmallow import fields

from service.api.common import MetricSeriesSchema


class TopicMetricSchema(MetricSeriesSchema):
    source = fields.String()
    target = fields.String()
    upstreamTopic = fields.String(metadata={"description": "topic name in the source cluster"})
    topic = fields.String(metadata={"description": "remote (downstream) topic in the target cluster"})
    from_ms = fields.Integer(data_key="from")
    to_ms = fields.Integer(data_key="to")
