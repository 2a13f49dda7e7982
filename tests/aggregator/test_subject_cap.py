"""The subjects-per-replication rule (aggregator.subject_cap), pure: which new subjects a batch may add, which
it refuses, what is forgotten, and a batch's partials without the refused ones."""

from __future__ import annotations

import random

import pyarrow as pa

from aggregator import subject_cap
from aggregator.subject_cap import HOUR_MS, KnownSubjects, admit, apply, decide, member
from aggregator.window_partials import ALL_METRICS, STATS, BatchPartials, latest_of, partials_schema
from contract import redis_layout as layout

T0 = 1_700_002_800_000  # an hour boundary
REP = ("west", "east")


def test_new_subjects_fill_the_room_in_name_order_and_the_rest_are_refused():
    assert admit({"a|0|"}, ["c|0|", "a|0|", "b|0|", "b|0|"], cap=3) == (["b|0|", "c|0|"], [])
    assert admit({"a|0|"}, ["c|0|", "b|0|", "d|0|"], cap=2) == (["b|0|"], ["c|0|", "d|0|"])
    assert admit({"a|0|", "b|0|", "c|0|"}, ["d|0|"], cap=2) == ([], ["d|0|"])  # a lowered cap admits none


def test_the_decision_does_not_depend_on_the_order_records_came_in():
    known = KnownSubjects.of({member("east.t", p, None): T0 for p in range(8)})
    seen = {member(f"east.x{i}", 0, None): T0 for i in range(20)}
    shuffled = list(seen.items())
    random.Random(7).shuffle(shuffled)
    first, again = decide(REP, known, seen, cap=12), decide(REP, known, dict(shuffled), cap=12)
    assert (first.admitted, first.refused) == (again.admitted, again.refused)
    assert sorted(first.admitted) == sorted(seen)[:4] and first.refused == sorted(seen)[4:]


def test_known_subjects_are_never_refused_and_their_hour_moves_forward_only():
    known = KnownSubjects.of({"t|0|": T0, "t|1|": T0 + HOUR_MS})
    d = decide(REP, known, {"t|0|": T0 + 2 * HOUR_MS, "t|1|": T0, "t|2|": T0}, cap=2)
    assert d.refreshed == {"t|0|": T0 + 2 * HOUR_MS} and d.admitted == {} and d.refused == ["t|2|"]
    apply(known, d)
    assert known.hours == {"t|0|": T0 + 2 * HOUR_MS, "t|1|": T0 + HOUR_MS}
    assert known.clock == T0 + 2 * HOUR_MS


def test_a_subject_not_seen_for_a_day_of_the_replications_clock_makes_room():
    day = 24 * HOUR_MS
    known = KnownSubjects.of({"gone|0|": T0, "t|0|": T0 + day - HOUR_MS})
    still = decide(REP, known, {"t|0|": T0 + day, "new|0|": T0 + day}, cap=2)
    assert still.forgotten == [] and still.refused == ["new|0|"]  # a day old exactly: kept
    apply(known, still)
    later = decide(REP, known, {"t|0|": T0 + day + HOUR_MS, "new|0|": T0 + day + HOUR_MS}, cap=2)
    assert later.forgotten == ["gone|0|"] and later.forget_before == T0 + HOUR_MS
    assert later.admitted == {"new|0|": T0 + day + HOUR_MS} and later.refused == []
    apply(known, later)
    assert set(known.hours) == {"t|0|", "new|0|"} and known.floor == T0 + day + HOUR_MS


def test_a_book_rebuilt_from_what_redis_holds_decides_as_the_running_one():
    """A restarted aggregator reads the sorted set back (KnownSubjects.of): the next batch's decision
    must be the one the process that wrote it would have made."""
    running = KnownSubjects.of({})
    batches = [{member("east.t", p, None): T0 + (p % 3) * HOUR_MS for p in range(6)},
               {member("east.t", p, "g"): T0 + 30 * HOUR_MS for p in range(4)},
               {member("east.u", p, None): T0 + 31 * HOUR_MS for p in range(9)}]
    for seen in batches:
        reloaded = KnownSubjects.of(dict(running.hours))
        a, b = decide(REP, running, seen, cap=10), decide(REP, reloaded, seen, cap=10)
        assert (a.refreshed, a.forgotten, a.admitted, a.refused) == (b.refreshed, b.forgotten, b.admitted,
                                                                      b.refused)
        apply(running, a)


def _row(topic: str, partition: int, group: str = "", ts: int = T0, kind: str = "partition") -> dict:
    row = {"kind": kind, "level": "t" if partition == layout.WHOLE_TOPIC else "p", "target": REP[0],
           "source": REP[1], "group": group, "topic": topic, "partition": partition, "window_start": ts,
           "max_ts": ts, "upstream_topic": None}
    row |= {f"{m}__{s}": None for m in ALL_METRICS for s in (*STATS, "last_ts")}
    return row | {"record_count__n": 1.0, "record_count__sum": 1.0}


def test_a_batch_names_its_topic_partition_and_group_subjects_but_not_the_replication():
    windows = pa.Table.from_pylist([
        _row("east.t", 0, ts=T0 + 5_000), _row("east.t", 0, ts=T0 + HOUR_MS + 5_000),
        _row("east.t", layout.WHOLE_TOPIC), _row("east.t", 1, group="g|x"),
        _row(layout.ALL_TOPICS, layout.WHOLE_TOPIC)], schema=partials_schema())
    assert subject_cap.seen_subjects(windows) == {
        REP: {"east.t|0|": T0 + HOUR_MS, "east.t|-1|": T0, "east.t|1|g|x": T0}}


def test_refused_subjects_leave_no_window_and_no_latest_record():
    windows = pa.Table.from_pylist([_row("east.t", 0), _row("east.t", 1), _row("east.t", 1, group="g"),
                                    _row(layout.ALL_TOPICS, layout.WHOLE_TOPIC)], schema=partials_schema())
    latest = [{"kind": "partition", "target": "west", "source": "east", "topic": "east.t", "partition": p,
               "group": "", "ts": T0} for p in (0, 1)]
    kept = subject_cap.without(BatchPartials(windows, latest_of(latest), {}), {REP: {"east.t|1|"}})
    assert [(r["topic"], r["partition"], r["group"]) for r in kept.windows.to_pylist()] == [
        ("east.t", 0, ""), ("east.t", 1, "g"), (layout.ALL_TOPICS, layout.WHOLE_TOPIC, "")]
    assert kept.latest["partition"].to_pylist() == [0]


def test_the_known_subjects_are_looked_through_for_old_ones_only_when_one_may_be_old():
    known = KnownSubjects.of({})
    apply(known, decide(REP, known, {"t|0|": T0, "t|1|": T0 + HOUR_MS}, cap=9))
    assert (known.clock, known.floor, known.current) == (T0 + HOUR_MS, T0, {"t|1|"})
    later = T0 + 25 * HOUR_MS
    d = decide(REP, known, {"t|0|": later}, cap=9)  # the oldest refreshed: nothing forgotten, floor anew
    assert d.looked_for_old and d.forgotten == [] and d.refreshed == {"t|0|": later}
    apply(known, d)
    assert (known.floor, known.current) == (T0 + HOUR_MS, {"t|0|"})
    assert not decide(REP, known, {"t|0|": later}, cap=9).looked_for_old


def test_a_subject_refreshed_to_an_hour_past_the_forget_horizon_is_forgotten_in_the_same_batch():
    day = 24 * HOUR_MS
    known = KnownSubjects.of({"old|0|": T0, "t|0|": T0 + 2 * day})
    d = decide(REP, known, {"old|0|": T0 + HOUR_MS}, cap=9)  # late windows of a subject a day behind
    assert d.refreshed == {"old|0|": T0 + HOUR_MS} and d.forgotten == ["old|0|"]
    apply(known, d)
    assert set(known.hours) == {"t|0|"} and known.current == {"t|0|"}
