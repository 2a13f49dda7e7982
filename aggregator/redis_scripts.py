"""The Redis script only the aggregator runs: replacing merged windows.

Key names and member encodings come from ``contract.redis_layout``; this script is how the one
writer changes them atomically inside a batch's MULTI.
"""

from __future__ import annotations

# Replaces windows by their new absolute values (stored_windows computes them). Runs in the batch's MULTI
# after the batch-id check. A replaced window is removed by its score (its start: one member a start), so a
# merge sends only the new members, not the stored ones too (~40 % of its bytes, each copied ~5 times in
# Redis: parsed, made Lua strings, objects again, the sorted set's and the AOF's). Removed first, then the
# new members added. A key emptied by its removals is gone with its TTL until ZADD makes it again: the
# merge gives such a key its lifetime (stored_windows._trims). Retention is trimmed relative to the newest
# window written (when one is created in a new trim period), not the clock, so a replay of the same input
# leaves the same members. ARGV: per key, in KEYS order, its head (windows, replaced windows, cut-off or
# "", lifetime or ""; stored_windows.redis_calls lays it out), its windows (start, member) and the starts
# of the windows they replace: the (start, member) run is handed to ZADD as it is (building Lua tables of
# it cost more than the commands).
REPLACE_WINDOWS_LUA = """
local CHUNK = 1000
local pos = 1
for i = 1, #KEYS do
  local key = KEYS[i]
  local windows, replaced = tonumber(ARGV[pos]), tonumber(ARGV[pos + 1])
  local cut, ttl = ARGV[pos + 2], ARGV[pos + 3]
  local first = pos + 4
  local last = first + 2 * windows - 1
  for j = last + 1, last + replaced do
    redis.call('ZREMRANGEBYSCORE', key, ARGV[j], ARGV[j])
  end
  for j = first, last, 2 * CHUNK do
    redis.call('ZADD', key, unpack(ARGV, j, math.min(j + 2 * CHUNK - 1, last)))
  end
  pos = last + replaced + 1
  if cut ~= '' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. cut)
  end
  if ttl ~= '' then
    redis.call('PEXPIRE', key, ttl)
  end
end
return 1
"""
