"""Answer schemas of the health and readiness endpoints."""

from __future__ import annotations

from marshmallow import Schema, fields


class HealthSchema(Schema):
    status = fields.String(metadata={"description": "UP while the process answers"})


class ReadinessSchema(Schema):
    status = fields.String(metadata={"description": "READY, or STARTING when Redis does not answer"})
    redis = fields.String(metadata={"description": "ok, or the error Redis gave"})
