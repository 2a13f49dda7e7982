"""POST /query: each visible target answered from the rollups in one Redis pipeline per metric.

A target names one metric, or several the way the plugin formats a multi-value variable
(`(byte_count|record_count)`, or a pattern): each metric answers its own series, named after it, so
the legend tells them apart. Filters the service skipped are reported in every frame's
`meta.notices`, which Grafana shows on the panel.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from contract import redis_layout as layout
from contract.records.raw_metrics import SERVED_METRICS as METRICS
from service.grafana import catalog
from service.grafana.filters import Filter, filters_of, payload_filters, select
from service.grafana.queries import (
    ALERTS,
    ANNOTATION_COLUMNS,
    STATUS_COLUMNS,
    STATUS_TABLE,
    QueryError,
    Subject,
    alert_rows,
    plan,
    status_rows,
    table,
    timeserie,
)
from service.grafana.variable_values import RefusedValue, selector_of
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


def target_metrics(index: int, name: object) -> list[str]:
    """The metrics a target names, in catalog order: one name, an alternation, or a pattern."""
    where = f"targets[{index}].target"
    known = catalog.metric_names()
    try:
        selector = selector_of(name, where)
    except RefusedValue as refused:
        raise QueryError(str(refused)) from None
    if selector is None:
        raise QueryError(f"{where}: unknown metric {name!r}; see POST /grafana/metrics")
    unknown = sorted(selector.literals - set(known))
    if unknown:
        raise QueryError(
            f"{where}: unknown metric{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            "see POST /grafana/metrics"
        )
    chosen = [m for m in known if selector.matches(m)]
    if not chosen:
        raise QueryError(f"{where}: {selector.describe()} matches no metric; see POST /grafana/metrics")
    return chosen


def answer_target(
    reader: MetricsReader,
    index: int,
    target: Mapping,
    filters: list[Filter],
    span: tuple[int, int],
    shape: tuple[str, int],
    notices: list[str] | None = None,
) -> list[dict]:
    metrics = target_metrics(index, target.get("target"))
    payload = _payload(target)
    chosen = [*filters, *payload_filters(payload, f"targets[{index}].payload", notices)]
    replications = _chosen(reader.replications(), chosen)
    aggregate = str(payload.get("aggregate") or "topic")
    ref_id = target.get("refId")
    selected: dict[str, list[Subject]] = {}  # per subject kind: the target's metrics share its filters
    return [frame for metric in metrics
            for frame in _metric_frames(reader, metric, replications, chosen, aggregate, span, shape, ref_id,
                                        selected)]


def _metric_frames(
    reader: MetricsReader,
    name: str,
    replications: Sequence[Replication],
    chosen: Sequence[Filter],
    aggregate: str,
    span: tuple[int, int],
    shape: tuple[str, int],
    ref_id: str | None,
    selected: dict[str, list[Subject]],
) -> list[dict]:
    now_ms = int(time.time() * 1000)
    if name == STATUS_TABLE:
        return [table(STATUS_COLUMNS, status_rows(replication_healths(reader, replications), now_ms), ref_id)]
    if name == ALERTS:
        rows = alert_rows(replication_healths(reader, replications), now_ms)
        return [table(ANNOTATION_COLUMNS, [r for r in rows if span[0] <= r[1] and r[0] <= span[1]], ref_id)]
    spec = METRICS[name]
    kind = "group" if spec.subject == "group" else "topic"
    if kind not in selected:
        every = catalog.group_subjects(reader, replications) if kind == "group" \
            else catalog.topic_subjects(replications)
        selected[kind] = select(every, chosen)
    subjects = selected[kind]
    if not subjects:
        return []
    return _metric_series(reader, spec.name, subjects, aggregate, span, shape, ref_id)


def answer_query(reader: MetricsReader, body: Mapping, from_ms: int, to_ms: int) -> list[dict]:
    # Grafana 0.6.4+ sends `filters`; earlier versions sent `adhocFilters`: both are honoured.
    filters, notices = filters_of([*_list(body.get("filters")), *_list(body.get("adhocFilters"))])
    shape = plan(from_ms, to_ms, body.get("intervalMs"), body.get("maxDataPoints"))
    answers: list[dict] = []
    drawn: list[str | None] = []
    for index, target in enumerate(body.get("targets") or []):
        if target.get("hide") or not target.get("target"):
            continue  # hidden or empty targets are not drawn (the plugin drops them since 0.6.4)
        answers += answer_target(reader, index, target, filters, (from_ms, to_ms), shape, notices)
        drawn.append(target.get("refId"))
    return with_notices(answers, notices, drawn)


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def with_notices(frames: list[dict], notices: Sequence[str], ref_ids: Sequence[str | None]) -> list[dict]:
    """Frames carrying the notices in `meta.notices` (Grafana's QueryResultMetaNotice), which the panel
    shows; with no frame, one empty series per drawn target carries them, so the panel says why
    instead of a bare "No data"."""
    if not notices:
        return frames
    meta = {"notices": [{"severity": "warning", "text": text} for text in dict.fromkeys(notices)]}
    if not frames:
        frames = [{"target": "", "datapoints": [], **({"refId": r} if r else {})}
                  for r in dict.fromkeys(ref_ids)]
    return [{**frame, "meta": meta} for frame in frames]
