"""POST /query: each visible target answered from the rollups in one Redis pipeline per target."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from contract import redis_layout as layout
from contract.records.raw_metrics import SERVED_METRICS as METRICS
from service.grafana import catalog
from service.grafana.queries import (
    ALERTS,
    ANNOTATION_COLUMNS,
    STATUS_COLUMNS,
    STATUS_TABLE,
    Filter,
    QueryError,
    Subject,
    alert_rows,
    filters_of,
    payload_filters,
    plan,
    select,
    status_rows,
    table,
    timeserie,
)
from service.health.replication_overview import replication_healths
from service.metric_summary import merge_subjects
from service.metrics_reader import MetricsReader, Replication


def _payload(target: Mapping) -> Mapping:
    for key in ("payload", "data"):  # `data` is the payload of simpod < 0.3
        if isinstance(target.get(key), Mapping):
            return target[key]
    return {}


def _chosen(replications: Sequence[Replication], filters: Sequence[Filter]) -> list[Replication]:
    return [r for r in replications if select([Subject(r.source, r.target)], filters)]


def current_alerts(reader: MetricsReader, filters: Sequence[Filter]) -> list[list]:
    replications = _chosen(reader.replications(), filters)
    return alert_rows(replication_healths(reader, replications), int(time.time() * 1000))


def _series_id(subject: Subject, metric: str) -> layout.SeriesId:
    return layout.SeriesId(
        subject.target,
        subject.source,
        subject.topic or layout.ALL_TOPICS,
        layout.WHOLE_TOPIC,
        metric,
        subject.group,
    )


def _grouped(subjects: Sequence[Subject], aggregate: str) -> dict[Subject, list[Subject]]:
    """Subjects that share one series: per topic or group (default), or per replication."""
    groups: dict[Subject, list[Subject]] = {}
    for s in subjects:
        if aggregate == "replication":
            key = Subject(s.source, s.target)
        elif s.group is not None:
            key = Subject(s.source, s.target, group=s.group)
        else:
            key = s
        groups.setdefault(key, []).append(s)
    return groups


def _metric_series(
    reader: MetricsReader,
    metric: str,
    subjects: Sequence[Subject],
    aggregate: str,
    span: tuple[int, int],
    shape: tuple[str, int],
    ref_id: str | None,
) -> list[dict]:
    window, bucket = shape
    found = reader.windows([_series_id(s, metric) for s in subjects], window, *span)
    by_subject = dict(zip(subjects, found, strict=True))
    answers = []
    for key, members in _grouped(subjects, aggregate).items():
        windows = merge_subjects(by_subject[s] for s in members)
        answers.append(timeserie(metric, key, windows, bucket, ref_id))
    return answers


def answer_target(
    reader: MetricsReader,
    index: int,
    target: Mapping,
    filters: list[Filter],
    span: tuple[int, int],
    shape: tuple[str, int],
) -> list[dict]:
    name, ref_id = target.get("target"), target.get("refId")
    payload = _payload(target)
    chosen = [*filters, *payload_filters(payload)]
    replications = _chosen(reader.replications(), chosen)
    now_ms = int(time.time() * 1000)
    if name == STATUS_TABLE:
        return [table(STATUS_COLUMNS, status_rows(replication_healths(reader, replications), now_ms), ref_id)]
    if name == ALERTS:
        rows = alert_rows(replication_healths(reader, replications), now_ms)
        return [table(ANNOTATION_COLUMNS, [r for r in rows if span[0] <= r[1] and r[0] <= span[1]], ref_id)]
    spec = METRICS.get(str(name))
    if spec is None:
        raise QueryError(f"targets[{index}].target: unknown metric {name!r}; see POST /grafana/metrics")
    subjects = (
        catalog.group_subjects(reader, replications)
        if spec.subject == "group"
        else catalog.topic_subjects(replications)
    )
    subjects = select(subjects, chosen)
    if not subjects:
        return []
    aggregate = str(payload.get("aggregate") or "topic")
    return _metric_series(reader, spec.name, subjects, aggregate, span, shape, ref_id)


def answer_query(reader: MetricsReader, body: Mapping, from_ms: int, to_ms: int) -> list[dict]:
    # Grafana 0.6.4+ sends `filters`; earlier versions sent `adhocFilters`: both are honoured.
    filters = filters_of([*(body.get("filters") or []), *(body.get("adhocFilters") or [])])
    shape = plan(from_ms, to_ms, body.get("intervalMs"), body.get("maxDataPoints"))
    answers: list[dict] = []
    for index, target in enumerate(body.get("targets") or []):
        if target.get("hide") or not target.get("target"):
            continue  # hidden or empty targets are not drawn (the plugin drops them since 0.6.4)
        answers += answer_target(reader, index, target, filters, (from_ms, to_ms), shape)
    return answers
