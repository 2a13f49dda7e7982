"""Answer schemas of the health and readiness endpoints."""

from __future__ import annotations

from marshmallow import Schema, fields


class HealthSchema(Schema):
    status = fields.String(metadata={"description": "UP while the process answers"})


class ReadinessSchema(Schema):
    status = fields.String(metadata={"description": "READY, or STARTING when Redis does not answer"})
    redis = fields.String(metadata={"description": "ok, or unavailable (the reason is in the log only)"})
    discovery = fields.String(metadata={"description": "a gateway's discovery of other sites: ok or stopped"})
    rejected_records = fields.Integer(
        metadata={"description": "advertisements a gateway refused (too large, broken, forged)"})
