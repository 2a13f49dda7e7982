"""The Redis scripts only the aggregator runs: replacing merged windows and upserting latest values.

Key names and member encodings come from ``contract.redis_layout``; these scripts are how the one
writer changes them atomically inside a batch's MULTI.
"""

from __future__ import annotations

from contract.redis_layout import LATEST_TTL_MS, encode_latest


def latest_args(fields: list[tuple[str, dict]]) -> list[str]:
    """ARGV of UPSERT_LATEST_LUA for one hash: its fields and their values; each value must carry an
    integer `ts`."""
    argv = [str(LATEST_TTL_MS)]
    for name, value in fields:
        argv += [name, encode_latest(value), str(int(value["ts"]))]
    return argv


# Replaces each latest-value field of one hash only when the stored one is not newer: a replayed or late
# record cannot roll a dashboard back. Equal ts replaces, so a recomputed derived value gets through. One
# call per hash, not per field: a batch writes a few thousand fields into a few hundred hashes (a topic's
# partitions, a replication's verdicts), and a call per field cost ~0.2 s a batch. ARGV: the TTL, then
# field, value and ts of each.
UPSERT_LATEST_LUA = """
local written = 0
for i = 2, #ARGV, 3 do
  local current = redis.call('HGET', KEYS[1], ARGV[i])
  local newer = false
  if current then
    local ok, stored = pcall(cjson.decode, current)
    newer = ok and type(stored) == 'table' and tonumber(stored.ts) ~= nil
      and tonumber(stored.ts) > tonumber(ARGV[i + 2])
  end
  if not newer then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    written = written + 1
  end
end
if written > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return written
"""

# Replaces windows by their new absolute values (stored_windows computes them): per key, its new members
# are added first and the members they replace removed after, so a key is never empty for a moment
# (Redis would delete it and its TTL). Runs in the batch's MULTI after the batch-id check. Retention is
# trimmed relative to the newest window written (when one is created), not the clock, so a replay of the
# same input leaves the same members. ARGV: per key, in KEYS order, its head (windows, replaced members,
# cut-off or "", lifetime; stored_windows.redis_calls lays it out), its windows (start, member) and the
# members they replace: runs of ARGV handed to ZADD and ZREM as they are (building Lua
# tables of them cost more than the commands).
REPLACE_WINDOWS_LUA = """
local CHUNK = 1000
local pos = 1
for i = 1, #KEYS do
  local key = KEYS[i]
  local windows, replaced = tonumber(ARGV[pos]), tonumber(ARGV[pos + 1])
  local cut, ttl = ARGV[pos + 2], ARGV[pos + 3]
  pos = pos + 4
  local last = pos + 2 * windows - 1
  for j = pos, last, 2 * CHUNK do
    redis.call('ZADD', key, unpack(ARGV, j, math.min(j + 2 * CHUNK - 1, last)))
  end
  pos = last + 1
  last = pos + replaced - 1
  for j = pos, last, CHUNK do
    redis.call('ZREM', key, unpack(ARGV, j, math.min(j + CHUNK - 1, last)))
  end
  pos = last + 1
  if cut ~= '' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. cut)
    redis.call('PEXPIRE', key, ttl)
  end
end
return 1
"""
