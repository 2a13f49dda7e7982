"""Argument and answer schemas of the clusters resource."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from service.api.replications.schemas import ReplicationStatusSchema

ROLES = ("target", "source")


class ClusterSchema(Schema):
    cluster = fields.String()
    roles = fields.List(
        fields.String(validate=validate.OneOf(ROLES)),
        metadata={"description": "target: replications flow into it; source: out of it"},
    )


class ClusterListSchema(Schema):
    clusters = fields.List(fields.Nested(ClusterSchema))


class SummarySchema(Schema):
    value = fields.Float(allow_none=True, metadata={"description": "the metric over the whole range"})
    min = fields.Float(allow_none=True)
    max = fields.Float(allow_none=True)
    avg = fields.Float(allow_none=True)
    sum = fields.Float(allow_none=True)


class ReplicationInfoSchema(ReplicationStatusSchema):
    metrics = fields.Dict(keys=fields.String(), values=fields.Nested(SummarySchema))


class ClusterInfoSchema(ClusterSchema):
    from_ms = fields.Integer(data_key="from")
    to_ms = fields.Integer(data_key="to")
    granularity = fields.String()
    metrics = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(SummarySchema),
        metadata={"description": "totals over the replications into this cluster"},
    )
    replications = fields.List(
        fields.Nested(ReplicationInfoSchema),
        metadata={"description": "replications into and out of this cluster"},
    )
