"""Redis store: one Lua script per ingest call and stream (dedupe, order, fill, append,
trim, TTL), risk history in a sorted set. Keys carry a ``{stream}`` hash tag, so one
stream's keys share a Redis Cluster slot and the script may touch them all.

    scjepa:{pump-7}:buf    list of "ts|[v1,...,vV]", the last `window` readings
    scjepa:{pump-7}:seen   zset of accepted timestamps (the dedupe horizon)
    scjepa:{pump-7}:meta   hash: n (readings accepted), last_ts
    scjepa:{pump-7}:risk   zset of JSON risk records scored by window count n
    scjepa:{global}:streams  zset stream -> last ingest time (GET /streams, TTL)
    scjepa:{global}:latest   zset stream -> latest risk (the gauges)
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable
from typing import Any, TypeVar, cast

import numpy as np
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from service import metrics
from service.store import (
    AppendResult,
    Store,
    StoreUnavailable,
    StreamState,
    Summary,
    Values,
    Window,
)

T = TypeVar("T")

# KEYS: buf, seen, meta. ARGV: window, hop, ttl, horizon, max_windows, then per reading
# (ts, has_missing "0"/"1", values JSON). Window arithmetic mirrors completed_ends().
APPEND = """
local buf, seen, meta = KEYS[1], KEYS[2], KEYS[3]
local W, hop, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local horizon, maxw = tonumber(ARGV[4]), tonumber(ARGV[5])
local n0 = tonumber(redis.call('HGET', meta, 'n') or '0')
local last_s = redis.call('HGET', meta, 'last_ts')
local last_ts = last_s and tonumber(last_s) or nil
local total, dup, late, prev = n0, 0, 0, nil
for i = 6, #ARGV, 3 do
  local ts_s = ARGV[i]
  local ts = tonumber(ts_s)
  if last_ts ~= nil and ts <= last_ts then
    if redis.call('ZCOUNT', seen, ts, ts) > 0 then dup = dup + 1 else late = late + 1 end
  else
    local vals = ARGV[i + 2]
    if ARGV[i + 1] == '1' then
      if prev == nil then
        local tail = redis.call('LINDEX', buf, -1)
        prev = tail and cjson.decode(string.sub(tail, string.find(tail, '|', 1, true) + 1)) or {}
      end
      local v = cjson.decode(vals)
      for j = 1, #v do
        if v[j] == cjson.null and prev[j] ~= nil then v[j] = prev[j] end
      end
      vals = cjson.encode(v)
      prev = v
    else
      prev = nil
    end
    redis.call('RPUSH', buf, ts_s .. '|' .. vals)
    redis.call('ZADD', seen, ts, ts_s)
    total, last_ts, last_s = total + 1, ts, ts_s
  end
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
  local held = redis.call('LLEN', buf)
  local base = total - held + 1
  rows = redis.call('LRANGE', buf, first_n - W + 1 - base, last_n - base)
end
if total > n0 then
  redis.call('LTRIM', buf, -W, -1)
  redis.call('ZREMRANGEBYRANK', seen, 0, -horizon - 1)
  redis.call('HSET', meta, 'n', total, 'last_ts', last_s)
end
if total > 0 then
  redis.call('EXPIRE', buf, ttl)
  redis.call('EXPIRE', seen, ttl)
  redis.call('EXPIRE', meta, ttl)
end
return {total - n0, dup, late, total, count, ends, rows}
"""


def _encode(t: float, vals: Values) -> tuple[str, str, str]:
    missing = any(v is None or math.isnan(v) for v in vals)
    clean = [None if v is None or math.isnan(v) else float(v) for v in vals]
    return repr(float(t)), "1" if missing else "0", json.dumps(clean)


def _decode(row: bytes) -> tuple[float, list[float]]:
    ts, _, vals = row.decode().partition("|")
    return float(ts), [math.nan if v is None else v for v in json.loads(vals)]


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
        ts: list[float],
        values: list[Values],
        *,
        window: int,
        hop: int,
        max_windows: int,
    ) -> AppendResult:
        args: list[Any] = [window, hop, self.ttl_s, self.dedupe_horizon, max_windows]
        for t, vals in zip(ts, values, strict=True):
            args.extend(_encode(t, vals))
        keys = [self._key(stream, k) for k in ("buf", "seen", "meta")]
        reply = await self._call("append", self._append(keys=keys, args=args))
        accepted, dup, late, total, count, ends, raw = reply
        rows = [_decode(r) for r in raw]
        windows = []
        if ends:
            first = ends[0] - window + 1  # reading count of rows[0]
            for n in ends:
                part = rows[n - window + 1 - first : n - first + 1]
                values_ = np.array([v for _, v in part], dtype=np.float32)
                windows.append(Window(int(n), part[0][0], part[-1][0], values_))
        if accepted:
            await self._call(
                "touch",
                self.client.zadd(self._global("streams"), {stream: time.time()}),
            )
        return AppendResult(
            int(accepted), int(dup), int(late), int(total), int(count), windows
        )

    async def state(self, stream: str) -> StreamState | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hmget(self._key(stream, "meta"), ["n", "last_ts"])
        pipe.llen(self._key(stream, "buf"))
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
