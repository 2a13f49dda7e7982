"""Answer schema of the partition-metrics resource."""

from __future__ import annotations

from marshmallow import fields

from service.api.topics.schemas import TopicMetricSchema


class PartitionMetricSchema(TopicMetricSchema):
    partition = fields.Integer()
