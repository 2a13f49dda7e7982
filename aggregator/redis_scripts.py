"""The Redis scripts only the aggregator runs: replacing merged windows and upserting latest values.

Key names and member encodings come from ``contract.redis_layout``; these scripts are how the one
writer changes them atomically inside a batch's MULTI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from contract.redis_layout import LATEST_TTL_MS, encode_latest

# ARGV entries per UPSERT_LATEST_LUA call at most: a batch of a few thousand partitions takes one call,
# a larger one several (each a few ms of Redis, well under a multibulk's limits).
LATEST_ARGS_PER_CALL = 30_000


@dataclass
class WrittenLatest:
    """The value this writer last sent to each latest-value field (hash key, field) and its ts. A hint for
    UPSERT_LATEST_LUA, which decodes a stored value to read its ts unless it is the very value named here
    (a field's usual case: the sink wrote it in the last batch): the comparison is Redis's, so a write that
    failed, or a value someone else wrote, only costs the decode. Past `capacity` fields it starts over."""

    capacity: int = 1 << 17
    values: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)

    def expected(self, key: str, name: str, ts: int) -> str:
        """The value the field holds if this writer's last write to it stands, when that value is not newer
        than `ts` (so it may be replaced without reading it); "" when there is none such."""
        known = self.values.get((key, name))
        return known[0] if known is not None and known[1] <= ts else ""

    def remember(self, key: str, name: str, encoded: str, ts: int) -> None:
        if len(self.values) >= self.capacity:
            self.values.clear()
        self.values[(key, name)] = (encoded, ts)


def latest_hashes(latest: Iterable[tuple[str, str, dict]]) -> dict[str, list[tuple[str, dict]]]:
    """(hash key, field, value) triples as latest_calls takes them: per key its fields, each once with its
    newest value (the script reads a hash's fields before writing them)."""
    by_key: dict[str, dict[str, dict]] = {}
    for key, name, value in latest:
        fields = by_key.setdefault(key, {})
        held = fields.get(name)
        if held is None or int(held["ts"]) <= int(value["ts"]):
            fields[name] = value
    return {key: list(fields.items()) for key, fields in by_key.items()}


def latest_calls(hashes: Mapping[str, list[tuple[str, dict]]], written: WrittenLatest | None = None,
                 args_per_call: int | None = None) -> list[tuple[list[str], list[str]]]:
    """KEYS and ARGV of the UPSERT_LATEST_LUA calls that write `hashes` (key -> its fields, each once, and
    their values; each value must carry an integer `ts`), up to `args_per_call` ARGV entries a call
    (LATEST_ARGS_PER_CALL by default) but for a hash larger than that, which goes alone. With `written`,
    each field names the value it is expected to hold, and is remembered as sent."""
    limit = LATEST_ARGS_PER_CALL if args_per_call is None else args_per_call
    calls: list[tuple[list[str], list[str]]] = []
    keys: list[str] = []
    argv: list[str] = []
    for key, fields in hashes.items():
        if keys and len(argv) + 1 + 4 * len(fields) > limit:
            calls.append((keys, argv))
            keys, argv = [], []
        if not argv:
            argv.append(str(LATEST_TTL_MS))
        keys.append(key)
        argv.append(str(len(fields)))
        for name, value in fields:
            ts, encoded = int(value["ts"]), encode_latest(value)
            argv += [name, encoded, str(ts), written.expected(key, name, ts) if written is not None else ""]
            if written is not None:
                written.remember(key, name, encoded, ts)
    if keys:
        calls.append((keys, argv))
    return calls


# Replaces each latest-value field only when the stored one is not newer: a replayed or late record
# cannot roll a dashboard back. Equal ts replaces, so a recomputed derived value gets through. Many hashes
# a call: a batch writes a few thousand fields into a few hundred hashes (a topic's partitions, a
# replication's verdicts), and a call per field or per hash costs a round trip each (bench/RESULTS.md,
# "UPSERT_LATEST_LUA"). A hash's fields are read and written a chunk at a time (HMGET, HSET: Lua's unpack
# takes a few thousand values at most), and a stored value is decoded for its ts unless it is the one the
# caller expected (WrittenLatest): cjson.decode was a large share of the script's time. ARGV: the TTL,
# then per key in KEYS order its number of fields and their field, value, ts and expected value ("" for
# none).
UPSERT_LATEST_LUA = """
local CHUNK = 1000
local ttl = ARGV[1]
local pos = 2
local written = 0
for k = 1, #KEYS do
  local key = KEYS[k]
  local fields = tonumber(ARGV[pos])
  pos = pos + 1
  local wrote = false
  for first = 0, fields - 1, CHUNK do
    local last = math.min(first + CHUNK, fields) - 1
    local names = {}
    for i = first, last do
      names[#names + 1] = ARGV[pos + 4 * i]
    end
    local stored = redis.call('HMGET', key, unpack(names))
    local replace = {}
    for i = first, last do
      local at = pos + 4 * i
      local current = stored[i - first + 1]
      local newer = false
      if current and current ~= ARGV[at + 3] then
        local ok, value = pcall(cjson.decode, current)
        newer = ok and type(value) == 'table' and tonumber(value.ts) ~= nil
          and tonumber(value.ts) > tonumber(ARGV[at + 2])
      end
      if not newer then
        replace[#replace + 1] = ARGV[at]
        replace[#replace + 1] = ARGV[at + 1]
      end
    end
    if #replace > 0 then
      redis.call('HSET', key, unpack(replace))
      written = written + #replace / 2
      wrote = true
    end
  end
  pos = pos + 4 * fields
  if wrote then
    redis.call('PEXPIRE', key, ttl)
  end
end
return written
"""

# Replaces windows by their new absolute values (stored_windows computes them). Runs in the batch's MULTI
# after the batch-id check. A window is a field of its key's hash (redis_layout.series_key), so replacing
# one is one HSET: with sorted sets scored by start it was a removal and an add (and a key emptied on the
# way lost its TTL), ~5 commands a subject and batch where this is 3, and Redis's time goes per command.
# Retention is trimmed relative to the newest window written (when one is created in a new trim period),
# not the clock, so a replay of the same input leaves the same fields: the fields of the window's grid from
# `from` up to the cut-off are deleted (stored_windows._key_changes bounds them by what the key can hold),
# or, `from` "*" (the key's windows unknown) or that grid longer than the hash, every field before the
# cut-off among the hash's own. ARGV (stored_windows.redis_calls lays it out): the number of keys trimmed;
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
