"""The driver's topic eligibility under srm-control lists: what one refresh of the topic list costs.

A refresh asks, for every source topic, whether the replication copies it (driver.topic_filter
`should_replicate_topic`, with the allow and deny lists of srm-control.internal). Two shapes:
- `operator`: 50 names and 50 patterns an operator might list, over --names topics;
- `forged`: --entries deny patterns of --pattern-chars characters each, as anyone who may produce to
  srm-control.internal can write them (issue 39: 1,500 such entries cost seconds a topic name).
Each refresh takes the lists anew (as the driver does), two refreshes of one list version. A refresh
stops after --budget seconds and its cost a name is extrapolated to every name (the code of dd7ff17
needs that). No Kafka: the lists are applied to the driver's ControlState as its reader applies
records.

Usage: python bench/control_lists.py [--names 2000] [--entries 1500] [--pattern-chars 250] [--budget 30]
Last line: `control_refresh_ms=<forged shape, first refresh> control_refresh_again_ms=<second refresh>`.
"""

from __future__ import annotations

import argparse
import time

from contract.replication_policy import DefaultReplicationPolicy
from driver.control_lists import ControlState
from driver.topic_filter import TopicFilter, should_replicate_topic

try:
    from driver.control_record import ControlChange, ControlEntry
except ImportError:  # the layout of dd7ff17, a module this tree does not have: mypy cannot follow it
    from contract.records.control import (  # type: ignore[import-not-found, no-redef]
        ControlChange,
        ControlEntry,
    )


def state_with(entries: list[tuple[str, str]]) -> tuple[ControlState, int]:
    """A ControlState holding `entries` (list name, entry) for east -> west topics; how many it refused."""
    try:
        state = ControlState("west", ["east"])
    except TypeError:  # dd7ff17: unbounded, for every replication
        state = ControlState()
    refused = 0
    for list_name, name in entries:
        try:
            state.apply(ControlChange(ControlEntry("east", "west", "topics", list_name, name), True))
        except Exception:  # ControlRefused where the lists are bounded
            refused += 1
    return state, refused


def refresh(state: ControlState, names: list[str], budget_s: float) -> tuple[float, int]:
    """One refresh's ms over every name (extrapolated past the budget) and how many names it timed."""
    policy, topic_filter = DefaultReplicationPolicy(), TopicFilter()
    began = time.perf_counter()
    allow, deny = state.lists("east", "west", "topics")
    done = 0
    for name in names:
        should_replicate_topic(name, topic_filter, policy, "west", allow=allow, deny=deny)
        done += 1
        if time.perf_counter() - began > budget_s:
            break
    return (time.perf_counter() - began) / done * len(names) * 1000, done


def run(shape: str, entries: list[tuple[str, str]], names: list[str], budget_s: float) -> list[float]:
    state, refused = state_with(entries)
    figures = []
    for i in range(2):
        ms, timed = refresh(state, names, budget_s)
        figures.append(ms)
        print(f"{shape}: {len(entries) - refused} of {len(entries)} entries kept; refresh {i + 1} over "
              f"{len(names)} names: {ms:.1f} ms ({ms / len(names) * 1000:.1f} us a name"
              f"{f', extrapolated from {timed} names' if timed < len(names) else ''})", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", type=int, default=2000)
    parser.add_argument("--entries", type=int, default=1500)
    parser.add_argument("--pattern-chars", type=int, default=250)
    parser.add_argument("--budget", type=float, default=30.0)
    args = parser.parse_args()
    names = [f"orders-{i:05d}" for i in range(args.names)]
    operator = [("deny", f"orders-{i:05d}") for i in range(0, 100, 2)] + \
               [("allow" if i % 2 else "deny", f"team{i}\\..*") for i in range(50)]
    run("operator", operator, names, args.budget)
    body = "(?:ab|cd)?" * ((args.pattern_chars - 20) // 10)
    forged = [("deny", f"forged-{i:05d}-{body}x") for i in range(args.entries)]
    first, again = run("forged", forged, names, args.budget)
    print(f"control_refresh_ms={first:.1f} control_refresh_again_ms={again:.1f}")


if __name__ == "__main__":
    main()
