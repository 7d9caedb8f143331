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

# Keys; the {stream} hash tag keeps one stream's keys in one Redis Cluster slot, so the
# script may touch them all:
#   scjepa:{pump-7}:rows      list of the last `window` packed rows (row_dtype)
#   scjepa:{pump-7}:seen      zset of accepted timestamps (the dedupe horizon)
#   scjepa:{pump-7}:state     hash: n (readings accepted), last_ts
#   scjepa:{pump-7}:risk      zset of JSON risk records scored by window count n
#   scjepa:{global}:streams   zset stream -> last ingest time (GET /streams, TTL)
#   scjepa:{global}:latest    zset stream -> latest risk (the gauges)

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

# Refresh a stream's entry in the global registry at most this often per replica: the
# registry only needs to know the stream is live (TTL in days), not every call.
TOUCH_EVERY_S = 5.0


def _pack(values: np.ndarray, ts: np.ndarray) -> list[Any]:
    """Script arguments for readings: row size, then ts, missing flags, values packed."""
    x = np.ascontiguousarray(values, dtype=VALUE)
    flags = np.where(np.isnan(x).any(axis=1), MISSING, COMPLETE).tobytes()
    return [VALUE.itemsize * x.shape[1], ts.astype(TS).tobytes(), flags, x.tobytes()]


def _unpack(raw: list[bytes], n_channels: int) -> np.ndarray:
    """Rows as returned by the script -> structured array with fields ts and v."""
    return np.frombuffer(b"".join(raw), dtype=row_dtype(n_channels))


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
        self._touched: dict[str, float] = {}  # stream -> when this replica last touched
        self._touch_every = min(TOUCH_EVERY_S, ttl_s / 10)

    def _key(self, stream: str, what: str) -> str:
        return f"{self.prefix}:{{{stream}}}:{what}"

    def _global(self, what: str) -> str:
        return f"{self.prefix}:{{global}}:{what}"  # one slot, so ZINTER may join them

    async def _call(self, op: str, coro: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await coro
        except (RedisError, OSError) as e:
            raise StoreUnavailable(f"redis: {e}") from None
        finally:
            metrics.STORE_LATENCY.labels(op=op).observe(time.perf_counter() - start)

    async def append(
        self,
        stream: str,
        ts: np.ndarray,
        values: np.ndarray,
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> AppendResult:
        args = [window, hop, self.ttl_s, self.dedupe_horizon, max_windows]
        args += _pack(values, ts)
        keys = [self._key(stream, k) for k in ("rows", "seen", "state")]
        reply = await self._call("append", self._append(keys=keys, args=args))
        accepted, dup, late, total, count, ends, raw = reply
        windows = []
        if ends:
            rows = _unpack(raw, values.shape[1])
            first = ends[0] - window + 1  # reading count of rows[0]
            for n in ends:
                part = rows[n - window + 1 - first : n - first + 1]
                windows.append(
                    Window(
                        int(n), float(part["ts"][0]), float(part["ts"][-1]), part["v"]
                    )
                )
        now = time.monotonic()
        every = self._touch_every
        if accepted and now - self._touched.get(stream, -every) >= every:
            if len(self._touched) > 100_000:  # bound the memo, not the streams
                self._touched.clear()
            self._touched[stream] = now
            await self._call(
                "touch",
                self.client.zadd(self._global("streams"), {stream: time.time()}),
            )
        return AppendResult(
            int(accepted), int(dup), int(late), int(total), int(count), windows
        )

    async def state(self, stream: str) -> StreamState | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self._key(stream, "state"), ["n", "last_ts"])
        pipe.llen(self._key(stream, "rows"))
        (n, last_ts), buffered = await self._call("state", pipe.execute())
        if n is None:
            return None
        return StreamState(int(n), int(buffered), float(last_ts))

    async def put_risks(
        self, stream: str, records: list[tuple[int, str]], latest_risk: float
    ) -> None:
        key = self._key(stream, "risk")
        pipe = self.client.pipeline(transaction=False)  # keys in two Cluster slots
        pipe.zadd(key, {rec: n for n, rec in records})
        pipe.zremrangebyrank(key, 0, -self.history_len - 1)
        pipe.expire(key, self.ttl_s)
        pipe.zadd(self._global("latest"), {stream: latest_risk})
        await self._call("put_risks", pipe.execute())

    async def risks(self, stream: str, limit: int) -> list[str]:
        key = self._key(stream, "risk")
        raw = await self._call("risks", self.client.zrevrange(key, 0, limit - 1))
        return [cast(bytes, r).decode() for r in raw]

    async def latest(self, stream: str) -> tuple[StreamState | None, str | None]:
        """State and newest risk record in one round trip: one read-only script, which
        costs redis-py less than a pipeline of the three reads (docs/notebook/
        benchmarks.md, Service)."""
        keys = [self._key(stream, k) for k in ("state", "rows", "risk")]
        n, last_ts, buffered, rec = await self._call("latest", self._latest(keys=keys))
        state = (
            None if n is None else StreamState(int(n), int(buffered), float(last_ts))
        )
        return state, None if rec is None else cast(bytes, rec).decode()

    async def _live(self) -> list[Any]:
        """Forget streams idle past the TTL, in the registry and the latest risks."""
        streams, latest = self._global("streams"), self._global("latest")
        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(streams, "-inf", time.time() - self.ttl_s)
        pipe.zinterstore(latest, {latest: 1, streams: 0})  # keeps live members only
        pipe.zrange(streams, 0, -1)
        pipe.zrevrange(latest, 0, -1, withscores=True)
        return list(await self._call("live", pipe.execute()))

    async def streams(self) -> list[str]:
        names = (await self._live())[2]
        return sorted(cast(bytes, n).decode() for n in names)

    async def summary(self, threshold: float) -> Summary:
        _, _, names, latest = await self._live()
        risks = [float(r) for _, r in latest]
        return Summary(
            len(names), sum(r >= threshold for r in risks), max(risks, default=0.0)
        )

    async def ping(self) -> None:
        await self._call("ping", self.client.ping())

    async def close(self) -> None:
        await self.client.aclose()
