"""Answer schemas of the replications resource: state, Burrow-style lag evaluation, metrics."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from contract.lag_evaluation import Reason, Status
from contract.records.raw_metrics import READER_KINDS
from contract.status import ReplicationState
from service.api.common import MetricSeriesSchema


class ObservationSchema(Schema):
    ts = fields.Integer(attribute="ts_ms", metadata={"description": "window start, epoch ms"})
    offset = fields.Integer()
    lag = fields.Integer()


class PartitionEvaluationSchema(Schema):
    topic = fields.String(metadata={"description": "remote (downstream) topic"})
    partition = fields.Integer()
    status = fields.String(validate=validate.OneOf(list(Status)))
    reason = fields.String(validate=validate.OneOf(list(Reason)))
    complete = fields.Float(
        metadata={"description": "share of the evaluation window that holds observations"}
    )
    current_lag = fields.Integer()
    start = fields.Nested(ObservationSchema, allow_none=True)
    end = fields.Nested(ObservationSchema, allow_none=True)


class EvaluationSchema(Schema):
    status = fields.String(
        validate=validate.OneOf(list(Status)),
        metadata={"description": "Burrow group level: NOTFOUND, OK, WARN or ERR"},
    )
    reason = fields.String(
        validate=validate.OneOf(list(Reason)),
        metadata={"description": "worst partition's rule: OK, WARN, STOP, STALL, REWIND"},
    )
    complete = fields.Float()
    total_lag = fields.Integer()
    max_lag_partition = fields.Nested(PartitionEvaluationSchema, allow_none=True)
    partitions = fields.List(
        fields.Nested(PartitionEvaluationSchema),
        metadata={"description": "partitions at WARN or worse (all with `all=true`)"},
    )


class ReaderSchema(Schema):
    reader = fields.String(
        validate=validate.OneOf(READER_KINDS),
        metadata={"description": "what it reads: progress (mm2-offsets.<source>.internal), control "
                                 "(srm-control.internal), offset_syncs or checkpoints"},
    )
    rejected = fields.Integer(
        metadata={"description": "records it refused (too large, undecodable, out of range) since the "
                                 "reporting driver process started"}
    )
    alive = fields.Boolean(metadata={"description": "whether it reads now"})
    last_rejection = fields.String(
        allow_none=True,
        metadata={"description": "topic[partition]@offset of the last refused record and why (escaped)"},
    )


class HistoryGapSchema(Schema):
    lost_before = fields.Integer(
        allow_none=True,
        metadata={"description": "start of the earliest window Kafka still held at the rebuild, epoch ms: "
                                 "metrics before it are lost (null: the rebuild has no batch in yet)"})
    rebuilt_at = fields.Integer(metadata={"description": "when the aggregator found its Redis state gone, "
                                                         "epoch ms"})
    explanation = fields.String()


class ReplicationStatusSchema(Schema):
    source = fields.String()
    target = fields.String()
    state = fields.String(
        validate=validate.OneOf(list(ReplicationState)),
        metadata={"description": "ACTIVE, INACTIVE (enabled, no data), FAILED or UNKNOWN"},
    )
    explanation = fields.String()
    metrics_period_ms = fields.Integer()
    report_ts = fields.Integer(allow_none=True, metadata={"description": "driver's last report, epoch ms"})
    topics = fields.Integer(metadata={"description": "remote topics with metrics"})
    lag = fields.Nested(EvaluationSchema)
    lag_seconds = fields.Float(
        allow_none=True,
        metadata={"description": "latest lag in seconds of the worst partition (null: not known yet)"},
    )
    invalid_records = fields.Integer(
        metadata={"description": "raw-metrics records from this source that did not parse, in total"}
    )
    late_records = fields.Integer(
        metadata={"description": "raw-metrics records from this source that came after their window closed"}
    )
    readers = fields.List(
        fields.Nested(ReaderSchema),
        metadata={"description": "the driver's readers of its internal topics, from its last report "
                                 "(empty: none reported)"},
    )
    history = fields.Nested(
        HistoryGapSchema, allow_none=True,
        metadata={"description": "the gap left when the aggregator rebuilt the target's rollups from Kafka "
                                 "after Redis lost them (null: history complete)"})


class GroupStatusSchema(Schema):
    group = fields.String()
    lag = fields.Nested(EvaluationSchema)
    lag_seconds = fields.Float(
        allow_none=True,
        metadata={"description": "latest lag in seconds of the worst partition (null: not known yet)"},
    )


class TopicSchema(Schema):
    topic = fields.String(metadata={"description": "remote (downstream) topic"})
    upstreamTopic = fields.String()


class ReplicationDetailSchema(ReplicationStatusSchema):
    topic_names = fields.List(fields.Nested(TopicSchema), data_key="topicNames")
    groups = fields.List(fields.Nested(GroupStatusSchema))


class ReplicationListSchema(Schema):
    replications = fields.List(fields.Nested(ReplicationStatusSchema))
    states = fields.Dict(
        keys=fields.String(),
        values=fields.Integer(),
        metadata={"description": "number of replications per state"},
    )


class StatusArgs(Schema):
    all = fields.Boolean(
        load_default=False,
        metadata={"description": "list every partition's evaluation, not only those at WARN or worse"},
    )


class ReplicationMetricSchema(MetricSeriesSchema):
    source = fields.String()
    target = fields.String()
    from_ms = fields.Integer(data_key="from")
    to_ms = fields.Integer(data_key="to")
