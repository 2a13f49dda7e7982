"""The Redis script only the aggregator runs: replacing merged windows.

Key names and member encodings come from ``contract.redis_layout``; this script is how the one
writer changes them atomically inside a batch's MULTI.
"""

from __future__ import annotations

# Replaces windows by their new absolute values (stored_windows computes them) in keys it trims, in the
# merge part's MULTI (a key not trimmed is written by a plain HSET there: a script's arguments cost Redis
# twice what the command's do, window_calls). A window is a field of its key's hash
# (redis_layout.series_key), so replacing one is one HSET: with sorted sets scored by start it was a
# removal and an add (and a key emptied on the way lost its TTL), ~5 commands a subject and batch where
# this is 3, and Redis's time goes per command.
# Retention is trimmed relative to the newest window written (when one is created in a new trim period),
# not the clock, so a replay of the same input leaves the same fields: the fields of the window's grid from
# `from` up to the cut-off are deleted (stored_windows._key_changes bounds them by what the key can hold),
# or, `from` "*" (the key's windows unknown) or that grid longer than the hash, every field before the
# cut-off among the hash's own. ARGV (window_calls.calls_by_part lays it out): the number of keys trimmed;
# per key, in KEYS order, its number of fields, then start and member of each window (and field 'n',
# redis_layout.NEWEST_FIELD, with the key's newest start when the batch moves it): that run is handed to
# HSET as it is (building Lua tables of it cost more than the commands); then per key trimmed its position
# in KEYS, the trim's first start, the cut-off, the window's size and the key's lifetime.
REPLACE_WINDOWS_LUA = """
local CHUNK = 1000
local pos = 2
for i = 1, #KEYS do
  local fields = tonumber(ARGV[pos])
  local first = pos + 1
  local last = first + 2 * fields - 1
  for j = first, last, 2 * CHUNK do
    redis.call('HSET', KEYS[i], unpack(ARGV, j, math.min(j + 2 * CHUNK - 1, last)))
  end
  pos = last + 1
end
for t = 1, tonumber(ARGV[1]) do
  local key = KEYS[tonumber(ARGV[pos])]
  local from, cut, step, ttl = ARGV[pos + 1], ARGV[pos + 2], tonumber(ARGV[pos + 3]), ARGV[pos + 4]
  pos = pos + 5
  if from ~= cut then
    local limit = tonumber(cut)
    local gone = {}
    -- A grid longer than the hash (a key written again after a long gap) costs what the hash holds.
    if from == '*' then
      from = '-inf'
    elseif tonumber(from) >= limit then
      from = nil
    elseif (limit - tonumber(from)) / step > redis.call('HLEN', key) then
      from = '-inf'
    end
    if from == '-inf' then
      for _, name in ipairs(redis.call('HKEYS', key)) do
        local start = tonumber(name)
        if name ~= 'n' and (start == nil or start < limit) then
          gone[#gone + 1] = name
        end
      end
    elseif from then
      for start = tonumber(from), limit - 1, step do
        gone[#gone + 1] = string.format('%d', start)
      end
    end
    for j = 1, #gone, CHUNK do
      redis.call('HDEL', key, unpack(gone, j, math.min(j + CHUNK - 1, #gone)))
    end
  end
  redis.call('PEXPIRE', key, ttl)
end
return 1
"""
