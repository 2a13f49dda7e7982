"""A target whose rollups the aggregator rebuilt from Kafka: its replications' status shows the gap."""

from __future__ import annotations

import redis

from contract import redis_layout as layout
from service.health.history_gap import history_answer

REBUILT_AT = 1_700_020_000_000  # 2023-11-15T03:46:40Z
LOST_BEFORE = 1_700_010_060_000  # 2023-11-15T01:01:00Z


def test_a_rebuild_reads_as_the_history_lost_before_the_earliest_retained_window():
    answer = history_answer({b"detected_ts": b"1700020000000", b"history_from_ts": b"1700010060000",
                             b"checkpoint_kept": b"/ckpt/east.lost-20231115T034640Z"})
    assert answer == {"lost_before": LOST_BEFORE, "rebuilt_at": REBUILT_AT,
                      "explanation": "history before 2023-11-15T01:01:00Z lost: Redis state rebuilt from "
                                     "Kafka retention at 2023-11-15T03:46:40Z"}


def test_a_rebuild_without_its_first_batch_yet_is_shown_too_and_no_record_is_no_gap():
    answer = history_answer({b"detected_ts": b"1700020000000"})
    assert answer is not None and answer["lost_before"] is None
    assert "rebuilt from Kafka retention at 2023-11-15T03:46:40Z" in answer["explanation"]
    assert history_answer({}) is None
    assert history_answer({b"detected_ts": b"soon"}) is None  # broken: skipped with a warning


def test_the_replications_into_a_rebuilt_target_carry_the_gap_in_their_status(client, scenario):
    e, w, n = scenario.east, scenario.west, scenario.north
    assert client.get(f"/v2/replications/{e}/{w}").get_json()["history"] is None
    store = redis.Redis.from_url(scenario.redis_url)
    key = layout.rebuild_key(w)
    store.hset(key, mapping={"detected_ts": REBUILT_AT, "history_from_ts": LOST_BEFORE})
    try:
        history = client.get(f"/v2/replications/{e}/{w}").get_json()["history"]
        assert history["lost_before"] == LOST_BEFORE and history["explanation"].startswith(
            "history before 2023-11-15T01:01:00Z lost")
        listed = {(r["source"], r["target"]): r for r in client.get("/v2/replications").get_json()
                  ["replications"]}
        assert listed[(n, w)]["history"]["rebuilt_at"] == REBUILT_AT  # every replication into the target
    finally:
        store.delete(key)
