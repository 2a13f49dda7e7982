"""Answer schema of the services resource."""

from __future__ import annotations

from marshmallow import Schema, fields


class ServiceSchema(Schema):
    protocol = fields.String()
    host = fields.String()
    port = fields.Integer()
    root_path = fields.String()
    target_clusters = fields.List(fields.String())
    site = fields.String()
    version = fields.String()
    ts = fields.Integer(metadata={"description": "when the service was last seen, epoch ms"})
    local = fields.Boolean(metadata={"description": "true for the service answering this request"})
    status = fields.String(metadata={"description": "ok, timeout, or `error: <text>`"})


class ServiceListSchema(Schema):
    services = fields.List(fields.Nested(ServiceSchema))
