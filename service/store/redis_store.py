"""Redis store: one Lua script per ingest call and stream (dedupe, order, forward fill,
append, trim, TTL), risk history in a sorted set. Readings travel and rest as packed
rows (``service.store.row_dtype``: numpy in, numpy out), so nothing formats or parses a
value as text; the script unpacks values only to fill a reading that has a missing one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from string import Template
from typing import Any, TypeVar, cast

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service import metrics
from service.store import (
    TS,
    VALUE,
    AppendResult,
    Store,
    StoreUnavailable,
    StreamState,
    Summary,
    Window,
    row_dtype,
)

T = TypeVar("T")

# Keys; the {tenant/stream} hash tag keeps one stream's keys in one Redis Cluster slot,
# so one script may touch them all (a tenant name has no '/', a stream name neither):
#   scjepa:{acme/pump-7}:rows    list of the last `window` packed rows (row_dtype)
#   scjepa:{acme/pump-7}:seen    zset of accepted timestamps (the dedupe horizon)
#   scjepa:{acme/pump-7}:state   hash: n (readings accepted), last_ts
#   scjepa:{acme/pump-7}:risk    zset of JSON risk records scored by window count n
#   scjepa:{acme}:names          zset of the tenant's live streams, score 0 (by name:
#                                GET /streams pages, the stream quota counts them)
#   scjepa:{acme}:touched        zset stream -> last ingest time (the idle TTL)
#   scjepa:{global}:streams      zset tenant/stream -> last ingest time (the gauges)
#   scjepa:{global}:latest       zset tenant/stream -> latest risk (the gauges)
#   scjepa:{rate:KEYID}          one API key's rate-limit bucket (GCRA: a timestamp)

# KEYS: rows, seen, state. ARGV: window, hop, ttl, horizon, max_windows, row size
# (V values' bytes), then the readings as three packed strings: ts (one TS each),
# flags (MISSING or COMPLETE each), values (V VALUEs each). Window arithmetic mirrors
# completed_ends(); the fill mirrors forward_fill(). Pushes are variadic, in chunks
# under Lua's unpack() limit.
_APPEND = Template("""
local rows_k, seen, state = KEYS[1], KEYS[2], KEYS[3]
local W, hop, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local horizon, maxw, size = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ts_b, flags, vals_b = ARGV[7], ARGV[8], ARGV[9]
local n0 = tonumber(redis.call('HGET', state, 'n') or '0')
local last_s = redis.call('HGET', state, 'last_ts')
local last_ts = last_s and tonumber(last_s) or nil
local total, dup, late, prev = n0, 0, 0, nil
local new_rows, stamps = {}, {}
for i = 1, #flags do
  local ts_raw = string.sub(ts_b, $ts_size * (i - 1) + 1, $ts_size * i)
  local ts = struct.unpack('$ts_format', ts_raw)
  if last_ts ~= nil and ts <= last_ts then
    if redis.call('ZCOUNT', seen, ts, ts) > 0 then dup = dup + 1 else late = late + 1 end
  else
    local vals = string.sub(vals_b, size * (i - 1) + 1, size * i)
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
    stamps[#stamps + 1] = ts
    stamps[#stamps + 1] = ts_raw
    total, last_ts = total + 1, ts
  end
end
if total > n0 then last_s = string.format('%.17g', last_ts) end
for s = 1, #new_rows, 4000 do
  redis.call('RPUSH', rows_k, unpack(new_rows, s, math.min(s + 3999, #new_rows)))
end
for s = 1, #stamps, 4000 do
  redis.call('ZADD', seen, unpack(stamps, s, math.min(s + 3999, #stamps)))
end
local ends, rows = {}, {}
local first = math.max(n0 + 1, W)
first = W + math.ceil((first - W) / hop) * hop
local count = 0
for n = first, total, hop do count = count + 1 end
if count > 0 then
  local last_n = first + (count - 1) * hop
  local keep = math.min(count, maxw)
  local first_n = last_n - (keep - 1) * hop
  for k = 0, keep - 1 do ends[#ends + 1] = first_n + k * hop end
  local held = redis.call('LLEN', rows_k)
  local base = total - held + 1
  rows = redis.call('LRANGE', rows_k, first_n - W + 1 - base, last_n - base)
end
if total > n0 then
  redis.call('LTRIM', rows_k, -W, -1)
  redis.call('ZREMRANGEBYRANK', seen, 0, -horizon - 1)
  redis.call('HSET', state, 'n', total, 'last_ts', last_s)
end
if total > 0 then
  redis.call('EXPIRE', rows_k, ttl)
  redis.call('EXPIRE', seen, ttl)
  redis.call('EXPIRE', state, ttl)
end
return {total - n0, dup, late, total, count, ends, rows}
""")
_STRUCT = {"<f8": "<d", "<f4": "<f"}  # numpy's little-endian floats in Lua's struct
MISSING, COMPLETE = b"1", b"0"  # a reading's flag: has a missing value or not
APPEND = _APPEND.substitute(
    missing=ord(MISSING),
    ts_size=TS.itemsize,
    ts_format=_STRUCT[TS.str],
    value_size=VALUE.itemsize,
    value_format=_STRUCT[VALUE.str],
)

# KEYS: state, rows, risk. GET /risk's reads in one call: n, last_ts, buffered rows,
# the newest risk record (false -> nil when absent).
LATEST = """
local st = redis.call('HMGET', KEYS[1], 'n', 'last_ts')
local rec = redis.call('ZREVRANGE', KEYS[3], 0, 0)
return {st[1] or false, st[2] or false, redis.call('LLEN', KEYS[2]), rec[1] or false}
"""

# KEYS: the tenant's names, touched. ARGV: now, cutoff (older = idle past the TTL),
# the tenant's stream quota, ttl, then the streams. Forgets up to EXPIRE_BATCH idle
# streams, marks the known ones live, adds new ones while under the quota; returns the
# refused. Bounded: O(streams x log N), whatever the tenant's count.
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
local refused = {{}}
for i = 5, #ARGV do
  local s = ARGV[i]
  if redis.call('ZSCORE', touched, s) then
    redis.call('ZADD', touched, now, s)
  elseif count < quota then
    redis.call('ZADD', touched, now, s)
    redis.call('ZADD', names, 0, s)
    count = count + 1
  else
    refused[#refused + 1] = s
  end
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

# KEYS: {global}:streams, {global}:latest. ARGV: cutoff, threshold. Forgets a batch of
# idle streams, then counts with range queries: O(log N) per scrape, not O(N).
SUMMARY = f"""
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, {10 * EXPIRE_BATCH})
if #old > 0 then
  for s = 1, #old, 1000 do
    local part = {{unpack(old, s, math.min(s + 999, #old))}}
    redis.call('ZREM', KEYS[1], unpack(part))
    redis.call('ZREM', KEYS[2], unpack(part))
  end
end
local n = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf')
local alert = redis.call('ZCOUNT', KEYS[2], ARGV[2], '+inf')
local top = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {{n, alert, top[2] or false}}
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

# Register a stream again at most this often per replica: the registry only needs to
# know the stream is live (TTL in days), not every call.
TOUCH_EVERY_S = 5.0
MEMO_MAX = 100_000  # streams remembered as registered, per replica


def _pack(values: np.ndarray, ts: np.ndarray) -> list[Any]:
    """Script arguments for readings: row size, then ts, missing flags, values packed."""
    x = np.ascontiguousarray(values, dtype=VALUE)
    flags = np.where(np.isnan(x).any(axis=1), MISSING, COMPLETE).tobytes()
    return [VALUE.itemsize * x.shape[1], ts.astype(TS).tobytes(), flags, x.tobytes()]


def _unpack(raw: list[bytes], n_channels: int) -> np.ndarray:
    """Rows as returned by the script -> structured array with fields ts and v."""
    return np.frombuffer(b"".join(raw), dtype=row_dtype(n_channels))


def _appended(reply: Any, n_channels: int, window: int) -> AppendResult:
    """The append script's reply -> AppendResult with its windows cut."""
    accepted, dup, late, total, count, ends, raw = reply
    windows = []
    if ends:
        rows = _unpack(raw, n_channels)
        first = ends[0] - window + 1  # reading count of rows[0]
        for n in ends:
            part = rows[n - window + 1 - first : n - first + 1]
            windows.append(
                Window(int(n), float(part["ts"][0]), float(part["ts"][-1]), part["v"])
            )
    return AppendResult(
        int(accepted), int(dup), int(late), int(total), int(count), windows
    )


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
    ) -> None:
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.history_len = history_len
        self.dedupe_horizon = dedupe_horizon
        # A blocking pool: under a burst, requests queue for a connection (up to
        # timeout_s) instead of failing; redis-py's default pool raises past 100.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            health_check_interval=30,
        )
        self.client = aioredis.Redis(connection_pool=pool)
        self._append = self.client.register_script(APPEND)
        self._latest = self.client.register_script(LATEST)
        self._register = self.client.register_script(REGISTER)
        self._list = self.client.register_script(LIST)
        self._summary = self.client.register_script(SUMMARY)
        self._rate = self.client.register_script(RATE)
        # tenant/stream -> when this replica last registered it
        self._touched: dict[str, float] = {}
        self._touch_every = min(TOUCH_EVERY_S, ttl_s / 10)
        self._pruned = time.monotonic()

    def _key(self, tenant: str, stream: str, what: str) -> str:
        return f"{self.prefix}:{{{tenant}/{stream}}}:{what}"

    def _tenant(self, tenant: str, what: str) -> str:
        return f"{self.prefix}:{{{tenant}}}:{what}"

    def _global(self, what: str) -> str:
        return f"{self.prefix}:{{global}}:{what}"  # one slot, so one script reads both

    async def _call(self, op: str, coro: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await coro
        except (RedisError, OSError) as e:
            raise StoreUnavailable(f"redis: {e}") from None
        finally:
            metrics.STORE_LATENCY.labels(op=op).observe(time.perf_counter() - start)

    async def register(
        self, tenant: str, streams: list[str], max_streams: int
    ) -> list[str]:
        now, every = time.monotonic(), self._touch_every
        if now - self._pruned >= every:  # forget what must be registered again anyway
            self._pruned = now
            self._touched = {k: t for k, t in self._touched.items() if now - t < every}
        memo = self._touched
        due = [s for s in streams if now - memo.get(f"{tenant}/{s}", -every) >= every]
        if not due:
            return []
        wall = time.time()
        cutoff = repr(wall - self.ttl_s)
        keys = [self._tenant(tenant, "names"), self._tenant(tenant, "touched")]
        args: list[str | int] = [repr(wall), cutoff, max_streams, self.ttl_s, *due]
        refused = {
            cast(bytes, r).decode()
            for r in await self._call("register", self._register(keys=keys, args=args))
        }
        live = {f"{tenant}/{s}": wall for s in due if s not in refused}
        if live:
            await self._call("touch", self.client.zadd(self._global("streams"), live))
            if len(self._touched) > MEMO_MAX:  # bound the memo, not the streams
                self._touched.clear()
            self._touched.update(dict.fromkeys(live, now))
        return [s for s in due if s in refused]

    async def append(
        self,
        tenant: str,
        stream: str,
        ts: np.ndarray,
        values: np.ndarray,
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> AppendResult:
        (res,) = await self.append_many(
            tenant, [(stream, ts, values)], window=window, hop=hop,
            max_windows=max_windows,
        )  # fmt: skip
        return res

    async def append_many(
        self,
        tenant: str,
        items: list[tuple[str, np.ndarray, np.ndarray]],
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> list[AppendResult]:
        """One script call per stream, all in one pipeline: one round trip and one
        pooled connection per request, whatever its number of streams."""
        pipe = self.client.pipeline(transaction=False)
        for stream, ts, values in items:
            args = [window, hop, self.ttl_s, self.dedupe_horizon, max_windows]
            args += _pack(values, ts)
            keys = [self._key(tenant, stream, k) for k in ("rows", "seen", "state")]
            await self._append(keys=keys, args=args, client=pipe)
        replies = await self._call("append", pipe.execute())
        return [
            _appended(reply, values.shape[1], window)
            for reply, (_, _, values) in zip(replies, items, strict=True)
        ]

    async def state(self, tenant: str, stream: str) -> StreamState | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self._key(tenant, stream, "state"), ["n", "last_ts"])
        pipe.llen(self._key(tenant, stream, "rows"))
        (n, last_ts), buffered = await self._call("state", pipe.execute())
        if n is None:
            return None
        return StreamState(int(n), int(buffered), float(last_ts))

    async def put_risks(
        self,
        tenant: str,
        stream: str,
        records: list[tuple[int, str]],
        latest_risk: float,
    ) -> None:
        await self.put_risks_many(tenant, [(stream, records, latest_risk)])

    async def put_risks_many(
        self, tenant: str, items: list[tuple[str, list[tuple[int, str]], float]]
    ) -> None:
        pipe = self.client.pipeline(transaction=False)  # keys in several Cluster slots
        for stream, records, _ in items:
            key = self._key(tenant, stream, "risk")
            pipe.zadd(key, {rec: n for n, rec in records})
            pipe.zremrangebyrank(key, 0, -self.history_len - 1)
            pipe.expire(key, self.ttl_s)
        latest = {f"{tenant}/{stream}": risk for stream, _, risk in items}
        pipe.zadd(self._global("latest"), latest)
        await self._call("put_risks", pipe.execute())

    async def risks(self, tenant: str, stream: str, limit: int) -> list[str]:
        key = self._key(tenant, stream, "risk")
        raw = await self._call("risks", self.client.zrevrange(key, 0, limit - 1))
        return [cast(bytes, r).decode() for r in raw]

    async def latest(
        self, tenant: str, stream: str
    ) -> tuple[StreamState | None, str | None]:
        """State and newest risk record in one round trip: one read-only script, which
        costs redis-py less than a pipeline of the three reads (docs/notebook/
        benchmarks.md, Service)."""
        keys = [self._key(tenant, stream, k) for k in ("state", "rows", "risk")]
        n, last_ts, buffered, rec = await self._call("latest", self._latest(keys=keys))
        state = (
            None if n is None else StreamState(int(n), int(buffered), float(last_ts))
        )
        return state, None if rec is None else cast(bytes, rec).decode()

    async def streams(self, tenant: str, after: str | None, limit: int) -> list[str]:
        keys = [self._tenant(tenant, "names"), self._tenant(tenant, "touched")]
        start = "-" if after is None else "(" + after
        args: list[str | int] = [repr(time.time() - self.ttl_s), start, limit]
        names = await self._call("streams", self._list(keys=keys, args=args))
        return [cast(bytes, n).decode() for n in names]

    async def summary(self, threshold: float) -> Summary:
        keys = [self._global("streams"), self._global("latest")]
        args = [repr(time.time() - self.ttl_s), repr(threshold)]
        n, alert, top = await self._call("summary", self._summary(keys=keys, args=args))
        return Summary(int(n), int(alert), 0.0 if top is None else float(top))

    async def rate(self, bucket: str, rps: float, burst: int) -> float:
        period = 1e6 / rps
        args = [repr(period), repr(burst * period)]
        key = f"{self.prefix}:{{rate:{bucket}}}"
        wait = await self._call("rate", self._rate(keys=[key], args=args))
        return int(wait) / 1e6

    async def ping(self) -> None:
        await self._call("ping", self.client.ping())

    async def close(self) -> None:
        await self.client.aclose()
