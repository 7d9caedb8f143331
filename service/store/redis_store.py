"""Redis store: one Lua script per ingest call and stream (dedupe, order, forward fill,
append, trim, TTL), risk history in a sorted set. Readings travel and rest as packed
rows (``service.store.row_dtype``: numpy in, numpy out), so nothing formats or parses a
value as text; the script unpacks values only to fill a reading that has a missing one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from string import Template
from types import MappingProxyType
from typing import Any, TypeVar, cast

import numpy as np
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import (
    ConnectionError,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.retry import Retry

from service import metrics
from service.store import (
    ALERT_LOG_LEN,
    INCIDENTS_KEPT,
    NOVELTY_PRIOR,
    NOVELTY_WEIGHT,
    TS,
    VALUE,
    AlertLog,
    AppendResult,
    IncidentRow,
    LayoutChanged,
    QueueStats,
    Ranked,
    Record,
    Store,
    StoreUnavailable,
    StreamState,
    Summary,
    Window,
    WorkItem,
    row_dtype,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

GROUP = "scorers"  # the work queue's consumer group
CLUSTER_SCHEME = "redis+cluster://"  # SCJEPA_REDIS_URL naming a Redis Cluster node
MAX_BLOCK_S = 0.5  # a blocking queue read, under the socket timeout
CLUSTER_POLL_S = 0.01  # pause between idle polls of the partitions (Cluster)

# Keys. A stream's keys and its work-queue partition share one hash tag, {pP} with
# P = crc32("tenant/stream") % partitions, so they sit in one Redis Cluster slot and
# the append script may touch them all (a tenant name has no '/', a stream name
# neither); the partitions spread the streams over the Cluster's shards:
#   scjepa:{p3}:acme/pump-7:rows   list of the last `window` packed rows (row_dtype)
#   scjepa:{p3}:acme/pump-7:seen   string: accepted timestamps, packed TS, ascending
#                                  (the dedupe horizon; 8 bytes each)
#   scjepa:{p3}:acme/pump-7:state  hash: n (readings accepted), last_ts, layout, epoch
#                                  (Redis TIME in µs when the state was created,
#                                  later than the stream's previous; 0 = stored
#                                  before epochs), max_ts (held readings' newest),
#                                  novelty (its recent novelty, written with its
#                                  records: service.store.recent_novelty)
#   scjepa:{p3}:acme/pump-7:risk   zset of JSON risk records scored by window number n
#   scjepa:{p3}:acme/pump-7:pend   zset ts -> flag + packed row: readings held until the
#                                  watermark passes them (SCJEPA_ALLOWED_LATENESS_S > 0)
#   scjepa:{p3}:acme/pump-7:alerts zset "n start end risk" by window number n: its
#                                  windows in alert, the last ALERT_LOG_LEN (the alert
#                                  log; the state's first_end and cut complete it)
#   scjepa:{p3}:work               stream: completed windows waiting for a scorer
#                                  (fields t, s, n, e, k, w, g, l: tenant, stream,
#                                  window number, end ts, rows, the packed rows, the
#                                  stream's epoch, its layout), consumer group "scorers"
#   scjepa:{acme}:names            zset of the tenant's live streams, score 0 (by name:
#                                  GET /streams pages, the stream quota counts them)
#   scjepa:{acme}:touched          zset stream -> last ingest time (the idle TTL)
#   scjepa:{global}:streams        zset tenant/stream -> last ingest time (the gauges)
#   scjepa:{global}:latest         zset tenant/stream -> latest risk (the gauges; noted
#                                  only for a stream in :streams, see NOTE_LATEST)
#   scjepa:{global}:latest:acme    the same of one tenant's streams (its highest risks:
#                                  written with :latest by NOTE_LATEST, read by SUMMARY
#                                  and TOP)
#   scjepa:{global}:novelty        zset tenant/stream -> recent novelty (the same)
#   scjepa:{global}:latest_at      hash tenant/stream -> when the noted value was
#   scjepa:{global}:novelty_at     written (Redis TIME in µs, from PUT): a note older
#                                  than the one there is dropped (NOTE_LATEST)
#   scjepa:{acme}:incidents        hash incident id -> its record (JSON)
#   scjepa:{acme}:incidents_at     zset incident id -> when reported (Unix seconds)
#   scjepa:{acme}:incidents_of     hash incident id -> "OUTCOME LEAD" (what the gauges
#                                  count: a scrape reads no record)
#   scjepa:{rate:KEYID}            one API key's rate-limit bucket (GCRA: a timestamp)

# KEYS: rows, seen, state, work, risk, pend, alerts. ARGV: window, hop, ttl, horizon, max_queued,
# values' size (V VALUEs' bytes), then the readings as three packed strings: ts (one TS
# each), flags (MISSING or COMPLETE each), rows (row_dtype: TS then V VALUEs each, as
# stored); then tenant, stream, the consumer group, the layout the caller's model reads
# and what to do when the stream was built for another (refuse | fresh), the allowed
# lateness (seconds; 0 = none), '1' when the timestamps are strictly increasing (else
# '0'), '1' when the caller's registry memo alone holds the stream as registered (its
# register() skipped it: no state there means another replica deleted it since, so
# the script stores nothing and answers 'U': register it and call again). Readings
# still held (max_ts set) when the lateness is 0 are all released by the hold step run
# with L = 0, as MemoryStore.append does. The stream's epoch is kept
# in its state, given from Redis' clock when the state is created or started over.
# Window arithmetic mirrors completed_ends();
# the fill mirrors forward_fill(). Pushes are variadic, in chunks under Lua's unpack()
# limit. A timestamp at or before the newest is looked up in the packed seen string
# (binary search): a duplicate if there, else late.
_APPEND = Template("""
local rows_k, seen, state, work, risk = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pend, alerts = KEYS[6], KEYS[7]
local W, hop, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local horizon, maxq, size = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ts_b, flags, rows_b = ARGV[7], ARGV[8], ARGV[9]
local R = $ts_size + size  -- a row's bytes
local tenant, stream, group = ARGV[10], ARGV[11], ARGV[12]
local layout, on_change, L = ARGV[13], ARGV[14], tonumber(ARGV[15])
local ordered, memo_only = ARGV[16], ARGV[17]
local function new_epoch(prev)  -- Redis' clock in µs, later than the previous epoch
  local t = redis.call('TIME')
  local e = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if e <= prev then e = prev + 1 end
  return string.format('%.0f', e)
end
local h = redis.call('HMGET', state, 'layout', 'epoch', 'max_ts')
local built, epoch, max_s = h[1], h[2], h[3]
if memo_only == '1' and not epoch and redis.call('EXISTS', state) == 0 then
  return 'U'  -- new, and not in the tenant's names: not counted against the quota
end
if built and built ~= layout then
  if on_change == 'refuse' then return 'L ' .. built end
  redis.call('DEL', rows_k, seen, state, risk, pend, alerts)  -- 'fresh': starts over
  epoch, max_s = new_epoch(tonumber(epoch) or 0), false
elseif not epoch then  -- a new stream (or one forgotten after the TTL)
  if redis.call('EXISTS', state) == 1 then epoch = '0'
  else
    epoch = new_epoch(0)
    -- records of the stream's previous life (written late by a scorer after Redis
    -- lost its data, or left by an eviction): its window numbers begin again, and
    -- the old records would win over theirs and be GET /risk's newest
    redis.call('DEL', risk, alerts)
  end
end
local n0 = tonumber(redis.call('HGET', state, 'n') or '0')
local last_s = redis.call('HGET', state, 'last_ts')
local last_ts = last_s and tonumber(last_s) or nil
local total, dup, late, prev = n0, 0, 0, nil
local new_rows, stamps, seen_s = {}, {}, nil
local function was_seen(ts)
  if seen_s == nil then seen_s = redis.call('GET', seen) or '' end
  local lo, hi = 0, #seen_s / $ts_size - 1
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    local v = struct.unpack('$ts_format', seen_s, mid * $ts_size + 1)
    if v == ts then return true elseif v < ts then lo = mid + 1 else hi = mid - 1 end
  end
  return false
end
local taken = nil  -- with a lateness: this call's readings held (or released)
local hold = L > 0 or max_s  -- max_s with L = 0: release what an earlier L held
if hold then
  -- readings newer than the watermark (the newest ts - L) wait in pend; what the
  -- watermark passes is released in timestamp order into the loop below
  local max_ts = max_s and tonumber(max_s) or last_ts
  local wm = max_ts and (max_ts - L) or nil
  taken = 0
  for i = 1, #flags do
    local ts_raw = string.sub(ts_b, $ts_size * (i - 1) + 1, $ts_size * i)
    local ts = struct.unpack('$ts_format', ts_raw)
    if last_ts ~= nil and ts <= last_ts then
      if was_seen(ts) then dup = dup + 1 else late = late + 1 end
    elseif wm ~= nil and ts <= wm then late = late + 1
    elseif redis.call('ZCOUNT', pend, ts, ts) > 0 then dup = dup + 1
    else
      redis.call('ZADD', pend, ts,
                 string.sub(flags, i, i) .. string.sub(rows_b, R * (i - 1) + 1, R * i))
      taken = taken + 1
      if max_ts == nil or ts > max_ts then max_ts = ts end
    end
  end
  local out_ts, out_f, out_r = {}, {}, {}
  if max_ts ~= nil then
    local cut = string.format('%.17g', max_ts - L)
    local rel = redis.call('ZRANGEBYSCORE', pend, '-inf', cut)
    redis.call('ZREMRANGEBYSCORE', pend, '-inf', cut)
    for k = 1, #rel do
      local m = rel[k]
      out_f[k] = string.sub(m, 1, 1)
      out_ts[k] = string.sub(m, 2, 1 + $ts_size)
      out_r[k] = string.sub(m, 2)
    end
    if L > 0 then
      redis.call('HSET', state, 'max_ts', string.format('%.17g', max_ts),
                 'layout', layout, 'epoch', epoch)
      redis.call('HSETNX', state, 'n', 0)
      redis.call('EXPIRE', pend, ttl)
      redis.call('EXPIRE', state, ttl)
    else  -- L = 0: everything released, nothing held from here on
      redis.call('HDEL', state, 'max_ts')
    end
  end
  ts_b, flags, rows_b = table.concat(out_ts), table.concat(out_f), table.concat(out_r)
end
local m = #flags
-- the common call: timestamps strictly increasing (the caller checked: ARGV[16]) and
-- all after the newest, no value missing, no lateness. Every reading is new and
-- stored as sent: no lookup, unpack or fill per reading.
local fast = ordered == '1' and not hold and m > 0
  and not string.find(flags, '$missing_char', 1, true)
  and (last_ts == nil or struct.unpack('$ts_format', ts_b) > last_ts)
if fast then
  for i = 1, m do
    new_rows[i] = string.sub(rows_b, R * (i - 1) + 1, R * i)
  end
  stamps[1] = ts_b
  total, last_ts = n0 + m, struct.unpack('$ts_format', ts_b, $ts_size * (m - 1) + 1)
end
for i = 1, fast and 0 or m do
  local ts_raw = string.sub(ts_b, $ts_size * (i - 1) + 1, $ts_size * i)
  local ts = struct.unpack('$ts_format', ts_raw)
  if last_ts ~= nil and ts <= last_ts then
    if was_seen(ts) then dup = dup + 1 else late = late + 1 end
  else
    local vals = string.sub(rows_b, R * (i - 1) + $ts_size + 1, R * i)
    if string.byte(flags, i) == $missing then  -- a value is missing
      if prev == nil then
        local tail = redis.call('LINDEX', rows_k, -1)
        if tail then prev = string.sub(tail, $ts_size + 1) end
      end
      if prev ~= nil then
        local out = {}
        for j = 1, size, $value_size do
          local v = struct.unpack('$value_format', vals, j)
          if v ~= v then out[#out + 1] = string.sub(prev, j, j + $value_size - 1)
          else out[#out + 1] = string.sub(vals, j, j + $value_size - 1) end
        end
        vals = table.concat(out)
      end
    end
    prev = vals
    new_rows[#new_rows + 1] = ts_raw .. vals
    stamps[#stamps + 1] = ts_raw
    total, last_ts = total + 1, ts
  end
end
if total > n0 then last_s = string.format('%.17g', last_ts) end
for s = 1, #new_rows, 4000 do
  redis.call('RPUSH', rows_k, unpack(new_rows, s, math.min(s + 3999, #new_rows)))
end
local queued, shed = {}, 0
local first = math.max(n0 + 1, W)
local base = 1  -- the number of the oldest reading the rows list holds
if total >= first then
  base = total - redis.call('LLEN', rows_k) + 1
  -- rows lost while the state stayed (evicted key by key under an LRU
  -- maxmemory-policy): a window is cut from rows held only, once W of them are
  first = math.max(first, base + W - 1)
end
first = W + math.ceil((first - W) / hop) * hop
local count = 0
for n = first, total, hop do count = count + 1 end
if count > 0 then
  local depth = 0
  if redis.call('EXISTS', work) == 1 then depth = redis.call('XLEN', work)
  else redis.call('XGROUP', 'CREATE', work, group, '0', 'MKSTREAM') end
  -- back-pressure: past max_queued, only the call's newest window is queued
  local keep = math.min(count, math.max(1, maxq - depth))
  shed = count - keep
  local last_n = first + (count - 1) * hop
  local first_n = last_n - (keep - 1) * hop
  local rows = redis.call('LRANGE', rows_k, first_n - W + 1 - base, last_n - base)
  for k = 0, keep - 1 do
    local n = first_n + k * hop
    local i = n - W + 1 - (first_n - W + 1) + 1  -- rows[i] is the window's first row
    local e = struct.unpack('$ts_format', rows[i + W - 1])
    redis.call('XADD', work, '*', 't', tenant, 's', stream, 'n', n,
               'e', string.format('%.17g', e), 'k', W,
               'w', table.concat(rows, '', i, i + W - 1), 'g', epoch, 'l', layout)
    queued[#queued + 1] = n
  end
end
if total > n0 then
  redis.call('LTRIM', rows_k, -W, -1)
  local len = redis.call('APPEND', seen, table.concat(stamps))
  if len > $ts_size * (horizon + math.max(64, math.floor(horizon / 4))) then
    redis.call('SET', seen, redis.call('GETRANGE', seen, len - $ts_size * horizon, -1))
  end
  redis.call('HSET', state, 'n', total, 'last_ts', last_s, 'layout', layout,
             'epoch', epoch)
end
if total > 0 then
  redis.call('EXPIRE', rows_k, ttl)
  redis.call('EXPIRE', seen, ttl)
  redis.call('EXPIRE', state, ttl)
end
local held = 0
if L > 0 then held = redis.call('ZCARD', pend) end
-- one reply line (cheaper to read than an array): the counts, then the queued numbers
local out = {string.format('%d %d %d %d %d %d %d', taken or (total - n0), dup, late,
                           total, count, shed, held)}
for k = 1, #queued do out[k + 1] = string.format('%d', queued[k]) end
return table.concat(out, ' ')
""")
_STRUCT = {"<f8": "<d", "<f4": "<f"}  # numpy's little-endian floats in Lua's struct
MISSING, COMPLETE = b"1", b"0"  # a reading's flag: has a missing value or not
APPEND = _APPEND.substitute(
    missing=ord(MISSING),
    missing_char=MISSING.decode(),
    ts_size=TS.itemsize,
    ts_format=_STRUCT[TS.str],
    value_size=VALUE.itemsize,
    value_format=_STRUCT[VALUE.str],
)

# KEYS: risk, state, alerts. ARGV: history length, ttl, the epoch the windows were cut
# in, then per record n, the JSON record, its novelty ('' for none), its window's first
# and last timestamps ('' for none: not logged) and its risk when it is in alert (else
# '').
# A record written with a window goes to the alert log: the state's first_end (the
# earliest window end written), and when in alert the alerts zset, of which the last
# ALERT_LOG_LEN stay (the newest dropped is the state's cut). A record is added only
# when the stream has none for its window n (the first write wins: a window scored
# twice is recorded once) and the stream is still in that epoch: a scorer's late write
# for a stream that started over (or was forgotten) since its windows were cut writes
# nothing, where it would have won the new life's window of the same number. Each
# record added is folded into the state's recent novelty as recent_novelty() does
# (one without a novelty removes it). Returns one flag per record (1 = written now),
# the window number of the stream's newest record (false when refused), the recent
# novelty when a record was written ('' when removed; else false), and Redis' clock in
# µs: when these were read, so that notes of two writes sent in either order leave the
# later one's figures in the gauges' indexes (NOTE_LATEST).
_PUT = Template("""
local key, out = KEYS[1], {}
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch and redis.call('EXISTS', KEYS[2]) == 1 then epoch = '0' end  -- pre-epoch
if epoch ~= ARGV[3] then  -- another epoch, or no state: forgotten
  for i = 4, #ARGV, 6 do out[#out + 1] = 0 end
  return {out, false, false, false}
end
local h = redis.call('HMGET', KEYS[2], 'novelty', 'first_end')
local recent, noted = tonumber(h[1] or ''), false
local first, first_s, logged = tonumber(h[2] or ''), false, false
for i = 4, #ARGV, 6 do
  if redis.call('ZCOUNT', key, ARGV[i], ARGV[i]) == 0 then
    redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
    out[#out + 1] = 1
    local v = tonumber(ARGV[i + 2])
    if v then
      recent = recent or $prior
      recent = recent + $weight * (v - recent)
    else recent = nil end
    noted = true
    local e = tonumber(ARGV[i + 4])
    if e then
      if not first or e < first then first, first_s = e, ARGV[i + 4] end
      if ARGV[i + 5] ~= '' then
        redis.call('ZADD', KEYS[3], ARGV[i], ARGV[i] .. ' ' .. ARGV[i + 3] .. ' ' .. ARGV[i + 4] .. ' ' .. ARGV[i + 5])
        logged = true
      end
    end
  else
    out[#out + 1] = 0
  end
end
redis.call('ZREMRANGEBYRANK', key, 0, -tonumber(ARGV[1]) - 1)
redis.call('EXPIRE', key, ARGV[2])
if first_s then redis.call('HSET', KEYS[2], 'first_end', first_s) end
if logged then
  local over = redis.call('ZCARD', KEYS[3]) - $alert_log_len
  if over > 0 then
    local cut = redis.call('ZRANGE', KEYS[3], over - 1, over - 1)[1]
    redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1)
    redis.call('HSET', KEYS[2], 'cut', cut)
  end
end
redis.call('EXPIRE', KEYS[3], ARGV[2])
if noted then
  if recent then
    noted = string.format('%.17g', recent)
    redis.call('HSET', KEYS[2], 'novelty', noted)
  else
    noted = ''
    redis.call('HDEL', KEYS[2], 'novelty')
  end
end
local top = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
local t = redis.call('TIME')
return {out, top[2] or false, noted, string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))}
""")
PUT = _PUT.substitute(
    prior=repr(NOVELTY_PRIOR), weight=repr(NOVELTY_WEIGHT), alert_log_len=ALERT_LOG_LEN
)

# KEYS: the tenant's incidents, incidents_at, incidents_of. ARGV: id, reported at,
# record, "OUTCOME LEAD", kept. Keeps the incident (replacing one of the same id), then
# the last `kept` reported (one more than kept at most: no unpack() limit to mind).
PUT_INCIDENT = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  local old = redis.call('ZRANGE', KEYS[2], 0, over - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('HDEL', KEYS[3], unpack(old))
end
return 0
"""

# KEYS: incidents_at, then incidents (their records) or incidents_of (their outcomes).
# ARGV: 'rank' and a count (the last reported, newest first), or 'since' and a time
# (those reported at or after it). Their values in the hash, read in chunks under
# Lua's unpack() limit.
INCIDENTS = """
local ids, out = nil, {}
if ARGV[1] == 'rank' then
  ids = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
else
  ids = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf')
end
for i = 1, #ids, 1000 do
  local got = redis.call('HMGET', KEYS[2], unpack(ids, i, math.min(i + 999, #ids)))
  for j = 1, #got do out[#out + 1] = got[j] end
end
return out
"""

# KEYS: state, rows, risk. GET /risk's reads in one call: n, last_ts, buffered rows,
# the newest risk record, the recent novelty (false -> nil when absent).
LATEST = """
local st = redis.call('HMGET', KEYS[1], 'n', 'last_ts', 'novelty')
local rec = redis.call('ZREVRANGE', KEYS[3], 0, 0)
return {st[1] or false, st[2] or false, redis.call('LLEN', KEYS[2]), rec[1] or false,
        st[3] or false}
"""

# KEYS: {global}:streams, the gauges' indexes to note in ({global}:latest,
# {global}:novelty), then as many hashes of when each member's figure was written
# ({global}:latest_at, {global}:novelty_at). ARGV: per index, its number of (time,
# score, member) triples, then the triples; a score '' removes the member (and its
# time: a model without the monitor keeps none). A figure older (by PUT's clock) than
# the one noted is dropped: two scorers writing one stream's windows may note in the
# other order than they wrote, which left the earlier write's figure. Notes the
# streams still registered only: a stream deleted between its record and this
# (DELETE's ZREMs) is not noted back, where no idle expiry (by :streams) would find it.
# The latest risk also goes to its tenant's index ({global}:latest:TENANT, named from
# {global}:latest and the member's tenant: undeclared, but in the declared keys' slot).
NOTE_LATEST = """
local at, n = 1, (#KEYS - 1) / 2
for k = 2, n + 1 do
  local stop = at + 3 * tonumber(ARGV[at])
  for i = at + 1, stop, 3 do
    local member = ARGV[i + 2]
    local own = k == 2 and KEYS[2] .. ':' .. string.match(member, '^[^/]*')
    local seen = tonumber(redis.call('HGET', KEYS[k + n], member) or '')
    if seen and seen > tonumber(ARGV[i]) then  -- a later write's figure is there
    elseif ARGV[i + 1] == '' then
      redis.call('ZREM', KEYS[k], member)
      redis.call('HDEL', KEYS[k + n], member)
      if own then redis.call('ZREM', own, member) end
    elseif redis.call('ZSCORE', KEYS[1], member) then
      redis.call('ZADD', KEYS[k], ARGV[i + 1], member)
      redis.call('HSET', KEYS[k + n], member, ARGV[i])
      if own then redis.call('ZADD', own, ARGV[i + 1], member) end
    end
  end
  at = stop + 1
end
return 0
"""

# KEYS: rows, seen, state, risk, pend, alerts (one slot). Deletes them; returns {1, the
# stream's epoch} ('0' for a state stored before epochs, or records left without one),
# or {0, Redis' clock in µs} when none of them was there: no later than the epoch of a
# life started after it, and later than that of any life deleted before it (epochs are
# this node's clock when a life starts), so a retried DELETE whose first call removed
# the keys still closes that life's alert state (service.alerting: forget).
DELETE = """
local epoch = redis.call('HGET', KEYS[3], 'epoch')
if redis.call('DEL', unpack(KEYS)) == 0 then
  local t = redis.call('TIME')  -- no keys: a bound on any life deleted before
  return {0, string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))}
end
return {1, epoch or '0'}
"""

# KEYS: the tenant's names, touched. ARGV: now, cutoff (older = idle past the TTL),
# the tenant's stream quota, ttl, then the streams. Forgets up to EXPIRE_BATCH idle
# streams; returns the new streams past the quota, and then notes none of the streams
# (all or nothing: a refused request leaves nothing behind); else marks the known ones
# live and adds the new ones. Bounded: O(streams x log N), whatever the tenant's count.
EXPIRE_BATCH = 1000
REGISTER = f"""
local names, touched = KEYS[1], KEYS[2]
local now, cutoff, quota = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local old = redis.call('ZRANGEBYSCORE', touched, '-inf', cutoff, 'LIMIT', 0, {EXPIRE_BATCH})
if #old > 0 then
  redis.call('ZREM', touched, unpack(old))
  redis.call('ZREM', names, unpack(old))
end
local count = redis.call('ZCARD', names)
local refused, new = {{}}, {{}}
for i = 5, #ARGV do
  local s = ARGV[i]
  if not redis.call('ZSCORE', touched, s) and not new[s] then
    if count < quota then new[s] = true; count = count + 1
    else refused[#refused + 1] = s end
  end
end
if #refused > 0 then return refused end  -- all or nothing: none noted
for i = 5, #ARGV do
  redis.call('ZADD', touched, now, ARGV[i])
  if new[ARGV[i]] then redis.call('ZADD', names, 0, ARGV[i]) end
end
redis.call('EXPIRE', names, ARGV[4])
redis.call('EXPIRE', touched, ARGV[4])
return refused
"""

# KEYS: the tenant's names, touched. ARGV: cutoff, the range start ('-' or '(NAME'),
# limit. One page of live names, by name.
LIST = f"""
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, {EXPIRE_BATCH})
if #old > 0 then
  redis.call('ZREM', KEYS[2], unpack(old))
  redis.call('ZREM', KEYS[1], unpack(old))
end
return redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], '+', 'LIMIT', 0, ARGV[3])
"""

# KEYS: {global}:streams, {global}:latest, the tenant's index ({global}:latest:TENANT).
# ARGV: cutoff, limit. The index's first ``limit`` members still registered, live and
# noted, with their risks, highest first; the entries of streams gone it meets on the
# way (idle past the TTL, deleted, or left by another release) are dropped, so a call
# costs O(limit x log N) plus the entries it forgets, once each.
TOP = """
local out, cutoff, want, start = {}, tonumber(ARGV[1]), tonumber(ARGV[2]), 0
while #out < 2 * want do
  local page = redis.call('ZREVRANGE', KEYS[3], start, start + want - 1, 'WITHSCORES')
  if #page == 0 then break end
  local gone = {}
  for j = 1, #page, 2 do
    local live = tonumber(redis.call('ZSCORE', KEYS[1], page[j]) or '')
    if live and live > cutoff and redis.call('ZSCORE', KEYS[2], page[j]) then
      if #out < 2 * want then out[#out + 1] = page[j]; out[#out + 1] = page[j + 1] end
      start = start + 1
    else gone[#gone + 1] = page[j] end
  end
  if #gone > 0 then redis.call('ZREM', KEYS[3], unpack(gone)) end
end
return out
"""

SWEEP = 8  # members of each time hash checked per scrape (SUMMARY)
MENDS = 64  # entries of a tenant's index set right per scrape, at most (SUMMARY)

# KEYS: {global}:streams, {global}:latest, {global}:novelty, {global}:latest_at,
# {global}:novelty_at. ARGV: cutoff, threshold, top (>= 1), the number M of tenants
# with a threshold of their own, M pairs tenant, threshold, then tenants. Forgets a
# batch of idle streams (from their tenants' indexes too), then counts with range
# queries: O(log N + top + streams in alert + tenants) per scrape, not O(N) (those at
# or above the lowest threshold are read to count them by tenant, each at its own).
# Sweeps a few members of the two time hashes at random, dropping those no longer
# registered: a release before the hashes expires idle streams without them (during a
# roll-out), which would leave theirs for good.
# For the same reason each tenant's index asked for is swept alike, and its highest
# risk checked against :streams and :latest before it is returned: an entry of a
# stream gone is dropped and one another release left behind :latest is set to it,
# up to MENDS a tenant. Returns the count, the top members with their risks and with
# their recent novelty, tenant, count pairs of the streams in alert, and each
# tenant's highest latest risk ('0': none scored).
SUMMARY = f"""
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, {10 * EXPIRE_BATCH})
if #old > 0 then
  local own = {{}}
  for _, m in ipairs(old) do
    local key = KEYS[2] .. ':' .. string.match(m, '^[^/]*')
    if not own[key] then own[key] = {{}} end
    table.insert(own[key], m)
  end
  for key, ms in pairs(own) do
    for s = 1, #ms, 1000 do
      redis.call('ZREM', key, unpack(ms, s, math.min(s + 999, #ms)))
    end
  end
  for s = 1, #old, 1000 do
    local part = {{unpack(old, s, math.min(s + 999, #old))}}
    for k = 1, 3 do redis.call('ZREM', KEYS[k], unpack(part)) end
    for k = 4, 5 do redis.call('HDEL', KEYS[k], unpack(part)) end
  end
end
for k = 4, 5 do
  for _, m in ipairs(redis.call('HRANDFIELD', KEYS[k], {SWEEP})) do
    if not redis.call('ZSCORE', KEYS[1], m) then redis.call('HDEL', KEYS[k], m) end
  end
end
local n = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf')
local base, own, low = tonumber(ARGV[2]), {{}}, tonumber(ARGV[2])
local first = 5 + 2 * tonumber(ARGV[4])
for i = 5, first - 1, 2 do
  own[ARGV[i]] = tonumber(ARGV[i + 1])
  low = math.min(low, own[ARGV[i]])
end
local hot = redis.call('ZRANGEBYSCORE', KEYS[2], low, '+inf', 'WITHSCORES')
local by, tenants = {{}}, {{}}
for j = 1, #hot, 2 do
  local t = string.match(hot[j], '^[^/]*')
  if tonumber(hot[j + 1]) >= (own[t] or base) then
    if not by[t] then by[t] = 0; tenants[#tenants + 1] = t end
    by[t] = by[t] + 1
  end
end
local counts = {{}}
for _, t in ipairs(tenants) do counts[#counts + 1] = t; counts[#counts + 1] = by[t] end
local highest = {{}}
for i = first, #ARGV do
  local key, best = KEYS[2] .. ':' .. ARGV[i], nil
  for _, m in ipairs(redis.call('ZRANDMEMBER', key, {SWEEP})) do
    local live = tonumber(redis.call('ZSCORE', KEYS[1], m) or '')
    if not live or live <= tonumber(ARGV[1]) then redis.call('ZREM', key, m) end
  end
  for _ = 1, {MENDS} do
    local top = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
    if #top == 0 then best = '0'; break end
    local live = tonumber(redis.call('ZSCORE', KEYS[1], top[1]) or '')
    local now = redis.call('ZSCORE', KEYS[2], top[1])
    if not live or live <= tonumber(ARGV[1]) or not now then
      redis.call('ZREM', key, top[1])
    elseif tonumber(now) ~= tonumber(top[2]) then
      redis.call('ZADD', key, now, top[1])
    else best = top[2]; break end
  end
  highest[#highest + 1] = best or redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')[2] or '0'
end
local last = tonumber(ARGV[3]) - 1
return {{n, redis.call('ZREVRANGE', KEYS[2], 0, last, 'WITHSCORES'),
        redis.call('ZREVRANGE', KEYS[3], 0, last, 'WITHSCORES'), counts, highest}}
"""

# KEYS: the bucket. ARGV: period and burst in microseconds. GCRA on Redis's clock (one
# clock for every replica); mirrors service.store.gcra. Returns the wait in µs (0: ok).
RATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local period, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + period
local wait = new - burst - now
if wait > 0 then return math.ceil(wait) end
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000) + 1000)
return 0
"""

# {global} keys of the gauges' indexes: NOTE_LATEST's and SUMMARY's
NOTED = ("streams", "latest", "novelty", "latest_at", "novelty_at")

# Register a stream again at most this often per replica: the registry only needs to
# know the stream is live (TTL in days), not every call.
TOUCH_EVERY_S = 5.0
MEMO_MAX = 100_000  # streams remembered as registered, per replica


def _pack(values: np.ndarray, ts: np.ndarray) -> list[Any]:
    """Script arguments for readings: the values' size, then ts, missing flags and the
    rows (as stored: row_dtype) packed."""
    rows = np.empty(len(ts), dtype=row_dtype(values.shape[1]))
    rows["ts"], rows["v"] = ts, values
    flags = np.where(np.isnan(rows["v"]).any(axis=1), MISSING, COMPLETE).tobytes()
    size = VALUE.itemsize * values.shape[1]
    return [size, rows["ts"].tobytes(), flags, rows.tobytes()]


def _increasing(ts: np.ndarray) -> bool:
    return len(ts) < 2 or bool((ts[1:] > ts[:-1]).all())


def _resp(parts: Sequence[bytes | str | int | float]) -> bytes:
    """One command as Redis reads it (RESP): bytes as they are, text as UTF-8,
    numbers as their decimal text (what redis-py sends)."""
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        raw = p if type(p) is bytes else str(p).encode()
        out += (b"$%d\r\n" % len(raw), raw, b"\r\n")
    return b"".join(out)


def _pairs(reply: Any) -> list[Any]:
    """A WITHSCORES reply as (member, score) pairs: RESP3 sends pairs, RESP2 a flat
    list."""
    if reply and not isinstance(reply[0], list):
        return list(zip(reply[::2], reply[1::2], strict=True))
    return cast(list[Any], reply)


def _ranked(reply: Any) -> Ranked:
    """A WITHSCORES reply of a gauges' index (members tenant/stream; a tenant holds no
    "/", auth.py) as (tenant, stream, score), in its order."""
    out = []
    for member, score in _pairs(reply):
        tenant, _, stream = member.decode().partition("/")
        out.append((tenant, stream, float(score)))
    return tuple(out)


def _float(raw: bytes | None) -> float | None:
    return None if raw is None else float(raw)


def _news(scored: list[tuple[str, str, list[int]]]) -> str:
    """The scored-window news message: a line ``tenant/stream n n ...`` per stream."""
    return "\n".join(f"{t}/{s} {' '.join(map(str, ns))}" for t, s, ns in scored)


def partition(tenant: str, stream: str, partitions: int) -> int:
    """The work-queue partition (and hash tag) of a stream: stable across processes."""
    return zlib.crc32(f"{tenant}/{stream}".encode()) % partitions


def _appended(reply: bytes, stream: str, layout: str) -> AppendResult:
    """The append script's reply: ``accepted duplicates late total completed shed
    held`` then the queued window numbers, ``L <layout>`` (refused: built for it) or
    ``U`` (nothing stored: a new stream the caller did not register)."""
    if reply[:2] == b"L ":
        raise LayoutChanged(stream, reply[2:].decode(), layout)
    if reply == b"U":
        return AppendResult(0, 0, 0, 0, 0, [], unregistered=True)
    accepted, dup, late, total, count, shed, held, *queued = map(int, reply.split())
    return AppendResult(accepted, dup, late, total, count, queued, shed, held)


def _item(pid: int, entry_id: bytes, fields: dict[bytes, bytes]) -> WorkItem | None:
    """A work-queue entry -> WorkItem (None for one deleted under a pending claim)."""
    if not fields:
        return None
    raw, k = fields[b"w"], int(fields[b"k"])
    v = (len(raw) // k - TS.itemsize) // VALUE.itemsize  # a row: TS, then V VALUEs
    rows = np.frombuffer(raw, dtype=row_dtype(v))
    window = Window(
        int(fields[b"n"]), float(rows["ts"][0]), float(rows["ts"][-1]), rows["v"]
    )
    return WorkItem(
        f"{pid}-{entry_id.decode()}",
        fields[b"t"].decode(),
        fields[b"s"].decode(),
        window,
        int(fields.get(b"g", b"0")),  # none: queued before epochs were kept
        fields.get(b"l", b"").decode(),  # none: queued before layouts were kept
    )


def connect(url: str, *, timeout_s: float, max_connections: int = 64) -> Any:
    """A client for ``SCJEPA_REDIS_URL``: a RedisCluster for ``redis+cluster://``, else
    one on a blocking pool (under a burst, callers queue for a connection up to
    ``timeout_s`` instead of failing; redis-py's default pool raises past 100) that
    retries once on a fresh connection (a stale pooled one after a Redis restart)."""
    if url.startswith(CLUSTER_SCHEME):
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(
            "redis://" + url[len(CLUSTER_SCHEME) :],
            max_connections=max_connections,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=30,
        retry_on_error=[ConnectionError],
        retry=Retry(NoBackoff(), 1),
    )
    return aioredis.Redis(connection_pool=pool)


class RedisStore(Store):
    def __init__(
        self,
        url: str,
        *,
        prefix: str,
        ttl_s: int,
        history_len: int,
        dedupe_horizon: int,
        timeout_s: float,
        max_connections: int = 64,
        partitions: int = 16,
        layout: str = "",
        on_layout_change: str = "fresh",
        lateness_s: float = 0.0,
    ) -> None:
        self.prefix = prefix
        self.lateness_s = lateness_s
        self.ttl_s = ttl_s
        self.history_len = history_len
        self.dedupe_horizon = dedupe_horizon
        self.partitions = partitions
        self.layout = layout
        self.on_layout_change = on_layout_change
        self.cluster = url.startswith(CLUSTER_SCHEME)
        self.timeout_s = timeout_s
        self.client: Any = connect(
            url, timeout_s=timeout_s, max_connections=max_connections
        )
        # blocking queue reads hold a connection up to MAX_BLOCK_S: their own pool, so
        # that a scorer in this process never takes the API's connections
        self.reader: Any = self.client
        if not self.cluster:
            self.reader = aioredis.Redis.from_url(
                url,
                max_connections=16,
                socket_timeout=timeout_s + MAX_BLOCK_S,
                socket_connect_timeout=timeout_s,
                health_check_interval=30,
            )
        self._append = self.client.register_script(APPEND)
        self._put = self.client.register_script(PUT)
        self._latest = self.client.register_script(LATEST)
        self._delete = self.client.register_script(DELETE)
        self._note_latest = self.client.register_script(NOTE_LATEST)
        self._register = self.client.register_script(REGISTER)
        self._list = self.client.register_script(LIST)
        self._summary = self.client.register_script(SUMMARY)
        self._top = self.client.register_script(TOP)
        self._rate = self.client.register_script(RATE)
        self._put_incident = self.client.register_script(PUT_INCIDENT)
        self._incidents = self.client.register_script(INCIDENTS)
        self.work_keys = [f"{prefix}:{{p{p}}}:work" for p in range(partitions)]
        self._channel = f"{prefix}:scored"  # news of scored windows (pub/sub)
        # tenant/stream -> when this replica last registered it
        self._touched: dict[str, float] = {}
        # those of them register() noted and no append has written since: an append
        # may create their state (the others must find it: see the append script)
        self._noted: set[str] = set()
        self._latency: dict[str, Any] = {}  # op -> its STORE_LATENCY child
        self._free: list[Any] = []  # idle connections of _send
        self._slots = asyncio.Semaphore(max_connections)
        self._touch_every = min(TOUCH_EVERY_S, ttl_s / 10)
        self._pruned = time.monotonic()

    def _key(self, tenant: str, stream: str, what: str) -> str:
        p = partition(tenant, stream, self.partitions)
        return f"{self.prefix}:{{p{p}}}:{tenant}/{stream}:{what}"

    def _tenant(self, tenant: str, what: str) -> str:
        return f"{self.prefix}:{{{tenant}}}:{what}"

    def _global(self, what: str) -> str:
        return f"{self.prefix}:{{global}}:{what}"  # one slot, so one script reads both

    def _tenant_latest(self, tenant: str) -> str:
        """The tenant's own index of latest risks, in {global}'s slot: the scripts
        that write and read :latest name it from that key and the member's tenant."""
        return f"{self._global('latest')}:{tenant}"

    async def _call(self, op: str, coro: Awaitable[T], *, scripts: bool = False) -> T:
        """One store operation, answered or failed within twice ``timeout_s``: up to
        ``timeout_s`` waiting for a connection under a burst, as long again for Redis.
        The client's own calls also time out each socket read and write at
        ``timeout_s``; the packed calls of :meth:`_send` have this bound only. A call
        cut short drops its connection: no reply is left for the next user.
        ``scripts``: ``coro`` is :meth:`_scripts`', which bounds each of its commands
        on a Cluster itself (:meth:`_bounded`)."""
        start = time.perf_counter()
        try:
            async with asyncio.timeout(2 * self.timeout_s):
                if self.cluster:  # the slot map first (a flag test once loaded)
                    await self._cluster_ready(coro)
                    if not scripts:
                        return await self._bounded(coro)
                return await coro
        except (RedisError, OSError) as e:  # TimeoutError is an OSError
            metrics.STORE_ERRORS.labels(op=op).inc()
            why = str(e) or ("timed out" if isinstance(e, TimeoutError) else repr(e))
            raise StoreUnavailable(f"redis: {why}") from None
        finally:
            latency = self._latency.get(op)
            if latency is None:
                latency = self._latency[op] = metrics.STORE_LATENCY.labels(op=op)
            latency.observe(time.perf_counter() - start)

    async def _cluster_ready(self, coro: Awaitable[Any]) -> None:
        """Load the Cluster's slot map before a command: redis-py routes a command
        sent before it is known to any node, and past a few MOVED replies resets the
        connections other calls are using (they fail with an AttributeError: a 500)."""
        try:
            await self.client.initialize()
        except BaseException:
            getattr(coro, "close", lambda: None)()  # not awaited: no warning
            raise

    async def _bounded(self, coro: Awaitable[T]) -> T:
        """A Cluster command (or pipeline: one connection per node) once fewer than
        max_connections are in flight. The Cluster client's per-node pools raise
        MaxConnectionsError when empty instead of waiting, as one Redis' blocking pool
        does: this makes a burst queue (within :meth:`_call`'s bound) there too."""
        async with self._slots:
            return await coro

    def _pipeline(self) -> Any:
        return self.client.pipeline(transaction=False)

    async def _scripts(
        self, calls: list[tuple[Any, list[str], list[Any]]]
    ) -> list[Any]:
        """Run (script, keys, args) calls: EVALSHAs written together on one pooled
        connection (one round trip) on one Redis; on a Cluster, whose pipelines take
        no scripts, concurrent calls, each in a slot. A script Redis does not know (a
        restart, SCRIPT FLUSH) is loaded and its calls run again: a NOSCRIPT call ran
        nothing. The commands are packed here, not by redis-py's command layer, whose
        per-argument encoding, pipeline and retry wrappers cost several times the
        packing (redis-py's pipelined scripts also ask SCRIPT EXISTS each time)."""
        if self.cluster:  # each call queues for a slot (_bounded), not the whole
            return await asyncio.gather(
                *(self._bounded(script(keys=k, args=v)) for script, k, v in calls)
            )
        packed = [
            _resp([b"EVALSHA", script.sha.encode(), len(keys), *keys, *args])
            for script, keys, args in calls
        ]
        out = await self._send(packed)
        again = [i for i, r in enumerate(out) if isinstance(r, NoScriptError)]
        if again:
            for script in {id(calls[i][0]): calls[i][0] for i in again}.values():
                await self._command([b"SCRIPT", b"LOAD", script.script])
            redo = await self._send([packed[i] for i in again])
            for i, r in zip(again, redo, strict=True):
                out[i] = r
        for r in out:
            if isinstance(r, Exception):
                raise r
        return out

    async def _command(self, parts: Sequence[bytes | str | int | float]) -> Any:
        """One command's reply, by :meth:`_send`; an error reply raised."""
        (reply,) = await self._send([_resp(parts)])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def _send(self, packed: list[bytes]) -> list[Any]:
        """Packed commands written at once on one connection; their replies in order,
        an error reply as its exception. A connection that fails is dropped and the
        commands sent once more on a fresh one (a stale connection after a Redis
        restart), as the client's retry does. The connections are the client pool's
        kind (same URL, handshake, health checks) kept in a free list of this store's:
        a pool's checkout and return cost a third of a call. A call cut short (its
        timeout) leaves no reply for the next user: redis-py closes a connection
        whose send or read is interrupted, and health-checks one whose handshake was."""
        async with self._slots:  # at most max_connections of them at once
            conn = self._free.pop() if self._free else self._new_connection()
            try:
                return await self._send_on(conn, packed)
            finally:
                self._free.append(conn)

    async def _send_on(self, conn: Any, packed: list[bytes]) -> list[Any]:
        for attempt in (1, 2):
            try:
                await conn.send_packed_command(packed)
                out: list[Any] = []
                for _ in packed:
                    try:
                        out.append(await conn.read_response())
                    except ResponseError as e:  # the connection reads on
                        out.append(e)
                return out
            except ConnectionError:
                await conn.disconnect()  # the next send connects again
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def register(
        self, tenant: str, streams: list[str], max_streams: int
    ) -> list[str]:
        now, every = time.monotonic(), self._touch_every
        if now - self._pruned >= every:  # forget what must be registered again anyway
            self._pruned = now
            self._touched = {k: t for k, t in self._touched.items() if now - t < every}
            self._noted &= self._touched.keys()
        memo = self._touched
        due = [s for s in streams if now - memo.get(f"{tenant}/{s}", -every) >= every]
        if not due:
            return []
        wall = time.time()
        cutoff = repr(wall - self.ttl_s)
        keys = [self._tenant(tenant, "names"), self._tenant(tenant, "touched")]
        args: list[str | int] = [repr(wall), cutoff, max_streams, self.ttl_s, *due]
        (names,) = await self._call(
            "register", self._scripts([(self._register, keys, args)]), scripts=True
        )
        refused = {cast(bytes, r).decode() for r in names}
        if refused:  # all or nothing: none of them noted
            return [s for s in due if s in refused]
        live = {f"{tenant}/{s}": wall for s in due}
        if self.cluster:  # another slot: the cluster client routes it
            await self._call("touch", self.client.zadd(self._global("streams"), live))
        else:
            touch: list[bytes | str | int | float] = [b"ZADD", self._global("streams")]
            for member, score in live.items():
                touch += (score, member)
            await self._call("touch", self._command(touch))
        # memoized on a Cluster too: else each of its ingests costs two more round
        # trips (the script and the ZADD, on other shards than the append's)
        if len(self._touched) > MEMO_MAX:  # bound the memo, not the streams
            self._touched.clear()
            self._noted.clear()
        self._touched.update(dict.fromkeys(live, now))
        self._noted.update(live)
        return []

    async def tenant_streams(self, tenants: Sequence[str]) -> list[int]:
        cutoff = f"({time.time() - self.ttl_s!r}"  # touched after it: live

        async def live(tenant: str) -> int:
            key = self._tenant(tenant, "touched")
            return int(await self._call("tenant_streams",
                                        self.client.zcount(key, cutoff, "+inf")))  # fmt: skip

        return list(await asyncio.gather(*(live(t) for t in tenants)))

    async def refuse_layouts(self, tenant: str, streams: list[str]) -> None:
        """One round trip reading the streams' layouts (only under 'refuse'). Not
        atomic with the append that follows: a replica running another model that
        writes one of these streams in between still gets it refused by the append
        script, after the request's other streams were stored."""
        if self.on_layout_change != "refuse" or not streams:
            return
        pipe = self._pipeline()
        for stream in streams:
            pipe.hget(self._key(tenant, stream, "state"), "layout")
        built = await self._call("layouts", pipe.execute())
        for stream, raw in zip(streams, built, strict=True):
            if raw is not None and raw.decode() != self.layout:
                raise LayoutChanged(stream, raw.decode(), self.layout)

    async def layouts(self, streams: list[tuple[str, str]]) -> list[str | None]:
        if not streams:
            return []
        pipe = self._pipeline()
        for tenant, stream in streams:
            pipe.hget(self._key(tenant, stream, "state"), "layout")
        built = await self._call("layouts", pipe.execute())
        return [None if raw is None else raw.decode() for raw in built]

    async def append(
        self,
        tenant: str,
        stream: str,
        ts: np.ndarray,
        values: np.ndarray,
        *,
        window: int,
        hop: int,
        max_queued: int,
    ) -> AppendResult:
        (res,) = await self.append_many(
            tenant, [(stream, ts, values)], window=window, hop=hop,
            max_queued=max_queued,
        )  # fmt: skip
        return res

    async def append_many(
        self,
        tenant: str,
        items: list[tuple[str, np.ndarray, np.ndarray]],
        *,
        window: int,
        hop: int,
        max_queued: int,
    ) -> list[AppendResult]:
        """One script call per stream, all in one pipeline: one round trip and one
        pooled connection per request, whatever its number of streams. Each script
        stores its stream's readings and queues the windows they complete, atomically.
        ``max_queued`` bounds the whole queue: each partition takes its share."""
        per_partition = max(1, max_queued // self.partitions)
        calls = []
        for stream, ts, values in items:
            args: list[Any] = [window, hop, self.ttl_s, self.dedupe_horizon]
            args += [per_partition, *_pack(values, ts)]
            args += [tenant, stream, GROUP, self.layout, self.on_layout_change]
            args += [repr(self.lateness_s), b"1" if _increasing(ts) else b"0"]
            member = f"{tenant}/{stream}"
            memo_only = member in self._touched and member not in self._noted
            self._noted.discard(member)
            args.append(b"1" if memo_only else b"0")
            p = partition(tenant, stream, self.partitions)
            base = f"{self.prefix}:{{p{p}}}:{tenant}/{stream}:"  # as _key() names them
            keys = [base + "rows", base + "seen", base + "state", self.work_keys[p]]
            keys += [base + "risk", base + "pend", base + "alerts"]
            calls.append((self._append, keys, args))
        replies = await self._call("append", self._scripts(calls), scripts=True)
        out = [
            _appended(reply, stream, self.layout)
            for reply, (stream, _, _) in zip(replies, items, strict=True)
        ]
        for res, (stream, _, _) in zip(out, items, strict=True):
            if res.unregistered:  # the next register() call notes it again
                self._touched.pop(f"{tenant}/{stream}", None)
        return out

    async def state(self, tenant: str, stream: str) -> StreamState | None:
        pipe = self._pipeline()
        pipe.hmget(self._key(tenant, stream, "state"), ["n", "last_ts", "novelty"])
        pipe.llen(self._key(tenant, stream, "rows"))
        (n, last_ts, novelty), buffered = await self._call("state", pipe.execute())
        if n is None:
            return None
        return StreamState(int(n), int(buffered), _float(last_ts), _float(novelty))

    async def delete(self, tenant: str, stream: str) -> int | None:
        """The stream's keys in one script (atomic against its appends and record
        writes, which run in the same slot), then its entries in the tenant's names
        and the gauges' indexes (other slots). In that order, so that a call failing
        between the two is retried whole: the retry finds no keys, removes the names
        left and answers as the first would have (a stream known by its name only
        counts as known, while the name is live: one idle past the TTL, its keys
        expired and its name not yet pruned, is unknown, as GET /streams and
        MemoryStore have it). The retry cannot read the deleted life's epoch; it
        returns Redis' clock, later than it, which closes that life's alert state as
        the epoch would (a firing alert is resolved, not left to its ``endsAt``)."""
        keys = [self._key(tenant, stream, k) for k in ("rows", "seen", "state", "risk")]
        keys += [self._key(tenant, stream, k) for k in ("pend", "alerts")]
        found, epoch = await self._call("delete", self._delete(keys=keys))
        member = f"{tenant}/{stream}"
        cutoff = time.time() - self.ttl_s
        pipe = self._pipeline()
        pipe.zscore(self._tenant(tenant, "touched"), stream)
        pipe.zrem(self._tenant(tenant, "names"), stream)
        pipe.zrem(self._tenant(tenant, "touched"), stream)
        pipe.zrem(self._global("streams"), member)
        pipe.zrem(self._global("latest"), member)
        pipe.zrem(self._tenant_latest(tenant), member)
        pipe.zrem(self._global("novelty"), member)
        pipe.hdel(self._global("latest_at"), member)
        pipe.hdel(self._global("novelty_at"), member)
        touched, named, *_ = await self._call("delete", pipe.execute())
        self._touched.pop(member, None)  # its next ingest registers it again
        if not found:  # a retry: the life's epoch went with its keys; Redis' clock
            live = named and touched is not None and float(touched) > cutoff
            return int(epoch) if live else None
        return int(epoch)

    async def put_scored(
        self,
        items: list[tuple[str, str, int, list[Record]]],
        *,
        ack: Sequence[str] = (),
        publish: bool = False,
    ) -> list[list[bool]]:
        """Two round trips: the record scripts (each also the stream's recent
        novelty, in its state), then (once they are written) the newest risks and
        recent novelties, the acknowledgements and the news, packed together on the
        store's own connections (:meth:`_run`) as the scripts are. Once the windows
        are acknowledged they are done: an error reply to the gauges' index of newest
        risks (a Redis at maxmemory refuses that ZADD, OOM, not XACK or XDEL) or to the
        news is counted and logged, not raised (raised, the scorer counted and told no
        one of windows nobody would claim again); one to an acknowledgement fails the
        call (the windows stay pending: claimed and scored again)."""
        calls = []
        for tenant, stream, epoch, records in items:
            args: list[Any] = [self.history_len, self.ttl_s, epoch]
            for r in records:
                novelty = "" if r.novelty is None else repr(r.novelty)
                start, end = ("", "") if r.span is None else map(repr, r.span)
                logged = repr(r.risk) if r.alert else ""  # the alert log's entry
                args += [r.n, r.record, novelty, start, end, logged]
            keys = [self._key(tenant, stream, k) for k in ("risk", "state", "alerts")]
            calls.append((self._put, keys, args))
        replies = await self._call("put_risks", self._scripts(calls), scripts=True)
        latest: list[Any] = []  # (time, score, member) triples of each index
        recent: list[Any] = []
        written = []
        for (tenant, stream, _, records), (flags, top, novelty, when) in zip(
            items, replies, strict=True
        ):
            written.append([bool(f) for f in flags])
            newest = max(records, key=lambda r: r[0])
            member = f"{tenant}/{stream}"
            if top is not None and int(float(top)) == newest[0]:
                latest += (when, newest[2], member)
            if novelty is not None:  # b"": removed (a model without the monitor)
                recent += (when, novelty, member)
        news = [(t, s, [r[0] for r in recs]) for t, s, _, recs in items]
        keys = [self._global(k) for k in NOTED]
        triples = [len(latest) // 3, *latest, len(recent) // 3, *recent]
        noted = bool(latest or recent)
        if (
            self.cluster
        ):  # a Cluster pipeline takes neither PUBLISH nor other slots' keys
            if noted:
                try:
                    await self._call(
                        "put_risks", self._note_latest(keys=keys, args=triples)
                    )
                except StoreUnavailable as e:  # the gauges' index only: see below
                    log.warning("scorer: newest risks not noted: %s", e)
            await self.ack_work(list(ack))
            return written
        commands = []
        if noted:  # the script's text: one round trip, no NOSCRIPT to recover from
            commands.append(["EVAL", NOTE_LATEST, len(keys), *keys, *triples])
        acks = self._ack_commands(ack)
        at = slice(len(commands), len(commands) + len(acks))
        commands += acks
        if publish and news:
            commands.append(["PUBLISH", self._channel, _news(news)])
        if commands:
            replies = await self._call("put_risks", self._run(commands, at))
            failed = [r for r in replies if isinstance(r, Exception)]
            if failed:  # counted as a failed operation, and logged
                metrics.STORE_ERRORS.labels(op="put_risks").inc()
                log.warning("scorer: newest risks or news not written: %s", failed[0])
        return written

    async def alert_log(self, tenant: str, stream: str) -> AlertLog | None:
        pipe = self._pipeline()
        pipe.zrange(self._key(tenant, stream, "alerts"), 0, -1)
        fields = ["n", "first_end", "cut", "last_ts"]
        pipe.hmget(self._key(tenant, stream, "state"), fields)
        alerting, (n, first_end, cut, last_ts) = await self._call(
            "alert_log", pipe.execute()
        )
        if n is None:
            return None
        windows = [e.split() for e in (cast(bytes, a).decode() for a in alerting)]
        span = cut.split()[1:3] if cut else None
        return AlertLog(
            # "n start end risk" ("n start end": logged before their risks were)
            [
                (int(w[0]), float(w[1]), float(w[2]), float(w[3]) if w[3:] else None)
                for w in windows
            ],
            _float(first_end),
            (float(span[0]), float(span[1])) if span else None,
            _float(last_ts),
        )

    async def put_incident(self, tenant: str, row: IncidentRow) -> None:
        keys = [
            self._tenant(tenant, k)
            for k in ("incidents", "incidents_at", "incidents_of")
        ]
        lead = "" if row.lead_s is None else repr(row.lead_s)
        args: list[Any] = [row.id, repr(row.reported_at), row.record]
        args += [f"{row.outcome} {lead}", INCIDENTS_KEPT]
        await self._call("incidents", self._put_incident(keys=keys, args=args))

    async def incidents(self, tenant: str, limit: int) -> list[str]:
        keys = [self._tenant(tenant, k) for k in ("incidents_at", "incidents")]
        got = await self._call(
            "incidents", self._incidents(keys=keys, args=["rank", limit])
        )
        return [cast(bytes, r).decode() for r in got if r is not None]

    async def delete_incident(self, tenant: str, incident: str) -> bool:
        pipe = self._pipeline()  # the record first: an id left in incidents_at
        pipe.hdel(self._tenant(tenant, "incidents"), incident)
        pipe.hdel(self._tenant(tenant, "incidents_of"), incident)
        pipe.zrem(self._tenant(tenant, "incidents_at"), incident)
        removed, *_ = await self._call("incidents", pipe.execute())
        return bool(removed)

    async def incident_outcomes(
        self, tenants: Sequence[str], since: float
    ) -> list[list[tuple[str, float | None]]]:
        calls = [
            (
                self._incidents,
                [self._tenant(t, k) for k in ("incidents_at", "incidents_of")],
                ["since", repr(since)],
            )
            for t in tenants
        ]
        got = await self._call("incidents", self._scripts(calls), scripts=True)
        out = []
        for g in got:
            pairs = [cast(bytes, r).decode().split(" ") for r in g if r is not None]
            out.append([(o, float(lead) if lead else None) for o, lead in pairs])
        return out

    async def scored(
        self, tenant: str, items: list[tuple[str, list[int]]]
    ) -> list[dict[int, str]]:
        reads = [
            (self._key(tenant, stream, "risk"), min(ns), max(ns))
            for stream, ns in items
        ]
        if self.cluster:
            pipe = self._pipeline()
            for key, lo, hi in reads:
                pipe.zrangebyscore(key, lo, hi, withscores=True)
            replies = await self._call("scored", pipe.execute())
        else:  # packed on the store's own connections, as the scripts are
            commands = [
                ["ZRANGEBYSCORE", key, lo, hi, "WITHSCORES"] for key, lo, hi in reads
            ]
            replies = [
                _pairs(r) for r in await self._call("scored", self._run(commands))
            ]
        out = []
        for (_, ns), raw in zip(items, replies, strict=True):
            want = set(ns)
            out.append(
                {int(n): cast(bytes, r).decode() for r, n in raw if int(n) in want}
            )
        return out

    async def risks(self, tenant: str, stream: str, limit: int) -> list[str]:
        key = self._key(tenant, stream, "risk")
        raw = await self._call("risks", self.client.zrevrange(key, 0, limit - 1))
        return [cast(bytes, r).decode() for r in raw]

    async def latest(
        self, tenant: str, stream: str
    ) -> tuple[StreamState | None, str | None]:
        """State and newest risk record in one round trip: one read-only script (cheaper
        than a pipeline of the three reads), packed on the store's own connections as
        the ingest scripts are (docs/notebook/benchmarks.md, Service)."""
        keys = [self._key(tenant, stream, k) for k in ("state", "rows", "risk")]
        ((n, last_ts, buffered, rec, novelty),) = await self._call(
            "latest", self._scripts([(self._latest, keys, [])]), scripts=True
        )
        state = (
            None
            if n is None
            else StreamState(int(n), int(buffered), _float(last_ts), _float(novelty))
        )
        return state, None if rec is None else cast(bytes, rec).decode()

    async def streams(self, tenant: str, after: str | None, limit: int) -> list[str]:
        keys = [self._tenant(tenant, "names"), self._tenant(tenant, "touched")]
        start = "-" if after is None else "(" + after
        args: list[str | int] = [repr(time.time() - self.ttl_s), start, limit]
        names = await self._call("streams", self._list(keys=keys, args=args))
        return [cast(bytes, n).decode() for n in names]

    async def top_streams(self, tenant: str, limit: int) -> list[tuple[str, float]]:
        keys = [self._global("streams"), self._global("latest")]
        keys.append(self._tenant_latest(tenant))
        args = [repr(time.time() - self.ttl_s), limit]
        raw = await self._call("top_streams", self._top(keys=keys, args=args))
        cut = len(tenant) + 1  # members are tenant/stream
        return [(m.decode()[cut:], float(r)) for m, r in _pairs(raw)]

    async def summary(
        self,
        threshold: float,
        top: int = 0,
        tenants: Sequence[str] = (),
        own: Mapping[str, float] = MappingProxyType({}),
    ) -> Summary:
        keys = [self._global(k) for k in NOTED]
        # one range read serves both max_risk (its first) and the top streams
        cutoff = time.time() - self.ttl_s
        pairs = [x for t, v in own.items() for x in (t, repr(v))]
        args = [repr(cutoff), repr(threshold), max(top, 1), len(own), *pairs, *tenants]
        n, risks, novelties, by, highest = await self._call(
            "summary", self._summary(keys=keys, args=args)
        )
        best = _ranked(risks)
        return Summary(
            int(n),
            best[0][2] if best else 0.0,
            best[:top],
            _ranked(novelties)[:top],
            tuple(sorted((t.decode(), int(c)) for t, c in _pairs(by))),
            tuple(zip(tenants, map(float, highest), strict=True)),
        )

    async def rate(self, bucket: str, rps: float, burst: int) -> float:
        period = 1e6 / rps
        args = [repr(period), repr(burst * period)]
        key = f"{self.prefix}:{{rate:{bucket}}}"
        wait = await self._call("rate", self._rate(keys=[key], args=args))
        return int(wait) / 1e6

    # -- the work queue
    async def ensure_groups(self) -> None:
        """Create the consumer group on every partition (an existing one is kept, and
        is no store error: every scorer start and queue reader finds them there)."""

        async def create(key: str) -> None:
            try:
                await self.client.xgroup_create(key, GROUP, "0", mkstream=True)
            except ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise

        for key in self.work_keys:
            await self._call("work", create(key))

    async def _read(self, coro: Awaitable[T]) -> T:
        """A queue read; a missing group (a Redis that lost its data) is recreated."""
        try:
            return await self._call("work", coro)
        except StoreUnavailable as e:
            if "NOGROUP" not in str(e):
                raise
            await self.ensure_groups()
            raise

    async def read_work(
        self, consumer: str, count: int, block_s: float
    ) -> list[WorkItem]:
        """Up to ``count`` windows: each partition gives its share (``count`` over the
        partitions, rounded up), then, if that left the read short, the partitions
        that had more give the rest. XREADGROUP's COUNT is per partition: unbounded, one
        read brought up to 16 batches, all pending on this scorer until scored, so
        with a slow model they waited past the claim timeout and were claimed and
        scored again, and other scorers of a pool found nothing to read."""
        share = -(-count // len(self.work_keys))
        got = await self._read_parts(consumer, self.work_keys, share, block_s)
        out = [it for items in got.values() for it in items]
        more = [
            self.work_keys[pid] for pid, items in got.items() if len(items) == share
        ]
        if len(out) < count and more:
            rest = -(-(count - len(out)) // len(more))
            again = await self._read_parts(consumer, more, rest, 0.0)
            out += [it for items in again.values() for it in items]
        return out

    async def _read_parts(
        self, consumer: str, keys: list[str], count: int, block_s: float
    ) -> dict[int, list[WorkItem]]:
        """New entries of the partitions ``keys``, at most ``count`` each, by partition."""
        got: dict[int, list[WorkItem]] = {}
        if self.cluster:  # one slot per call: every partition, then a pause if idle
            pipe = self._pipeline()
            for key in keys:
                pipe.xreadgroup(GROUP, consumer, {key: ">"}, count=count)
            for reply in await self._read(pipe.execute()):
                self._by_part(reply, got)
            if not got and block_s > 0:
                await asyncio.sleep(min(block_s, CLUSTER_POLL_S))
            return got
        block = int(min(block_s, MAX_BLOCK_S) * 1000) or None
        reply = await self._read(
            self.reader.xreadgroup(
                GROUP, consumer, dict.fromkeys(keys, ">"), count=count, block=block
            )
        )
        self._by_part(reply, got)
        return got

    def _by_part(self, reply: Any, got: dict[int, list[WorkItem]]) -> None:
        """XREADGROUP's reply ([[key, [(id, fields)]]] or a dict in RESP3), by partition."""
        pairs = reply.items() if isinstance(reply, dict) else (reply or [])
        for key, entries in pairs:
            pid = self._pid(key)
            part = got.setdefault(pid, [])
            for entry_id, fields in entries or ():
                item = _item(pid, entry_id, fields)
                if item is not None:
                    part.append(item)

    def _pid(self, key: bytes | str) -> int:
        k = key.decode() if isinstance(key, bytes) else key
        return int(k[k.index("{p") + 2 : k.index("}")])

    async def claim_work(
        self, consumer: str, min_idle_s: float, count: int
    ) -> list[WorkItem]:
        pipe = self._pipeline()
        idle_ms = int(min_idle_s * 1000)
        for key in self.work_keys:
            pipe.xautoclaim(key, GROUP, consumer, idle_ms, "0-0", count=count)
        replies = await self._read(pipe.execute())
        out = []
        for pid, reply in enumerate(replies):
            for entry_id, fields in reply[1]:
                item = _item(pid, entry_id, fields)
                if item is not None:
                    out.append(item)
        return out

    def _ack_commands(self, ids: Sequence[str]) -> list[list[Any]]:
        """XACK and XDEL of the work items ``ids`` (``pid-entry``), per partition."""
        by_pid: dict[int, list[str]] = {}
        for i in ids:
            head, _, entry = i.partition("-")
            by_pid.setdefault(int(head), []).append(entry)
        out: list[list[Any]] = []
        for pid, entries in by_pid.items():
            key = self.work_keys[pid]
            out += [["XACK", key, GROUP, *entries], ["XDEL", key, *entries]]
        return out

    async def _run(
        self, commands: list[list[Any]], must: slice = slice(None)
    ) -> list[Any]:
        """Commands written together on one of the store's connections (one round
        trip, :meth:`_send`), their replies; an error reply to one of ``must`` (all,
        by default) fails the call (raised inside :meth:`_call`, so it becomes
        StoreUnavailable), the others' are returned in their place."""
        replies = await self._send([_resp(c) for c in commands])
        for reply in replies[must]:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def ack_work(self, ids: list[str]) -> None:
        commands = self._ack_commands(ids)
        if not commands:
            return
        if self.cluster:  # a Cluster pipeline routes each command to its slot
            pipe = self._pipeline()
            for c in commands:
                pipe.execute_command(*c)
            await self._call("work", pipe.execute())
        else:
            await self._call("work", self._run(commands))

    async def listen_scored(
        self, deliver: Callable[[list[tuple[str, str, list[int]]]], None]
    ) -> None:
        if self.cluster:
            return  # waiters poll
        while True:
            pubsub = self.reader.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                async for msg in pubsub.listen():
                    news = []
                    for line in msg["data"].decode().split("\n"):
                        name, _, ns = line.partition(" ")
                        tenant, _, stream = name.partition("/")
                        news.append((tenant, stream, [int(n) for n in ns.split()]))
                    deliver(news)
            except (RedisError, OSError) as e:  # Redis down: the waiters poll
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # redis-py may turn a
                    raise asyncio.CancelledError from None  # cancellation into this
                log.debug("scored-window news: %s", e)
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()

    async def queue_stats(self) -> QueueStats:
        pipe = self._pipeline()
        for key in self.work_keys:
            pipe.xlen(key)
            pipe.xrange(key, "-", "+", count=1)
        replies = await self._call("work", pipe.execute())
        now = await self._call("work", self.client.time())
        now_ms = now[0] * 1000 + now[1] // 1000
        depth, oldest = 0, None
        for length, first in zip(replies[::2], replies[1::2], strict=True):
            depth += int(length)
            if first:
                ms = int(first[0][0].split(b"-")[0])
                oldest = ms if oldest is None else min(oldest, ms)
        age = 0.0 if oldest is None else max(0.0, (now_ms - oldest) / 1000)
        return QueueStats(depth, age)

    async def ping(self) -> None:
        # a tiny write, not PING: at maxmemory (noeviction) Redis still answers PING but
        # refuses every write with OOM, and so every ingest; readiness must say so.
        # One round trip as PING is (docs/reference/operations.md, Readiness).
        await self._call(
            "ping", self.client.set(self._global("ready"), b"1", px=10_000)
        )

    def _new_connection(self) -> Any:
        """A connection as the client's pool makes them, without its socket timeout
        (redis-py runs each timed write in a task of its own, which costs more CPU
        than the call): _call bounds each call as a whole."""
        pool = self.client.connection_pool
        return pool.connection_class(
            **pool.connection_kwargs | {"socket_timeout": None}
        )

    async def close(self) -> None:
        for conn in self._free:
            await conn.disconnect()
        self._free.clear()
        if self.reader is not self.client:
            await self.reader.aclose()
        await self.client.aclose()
