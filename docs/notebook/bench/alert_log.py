"""What the streams' alert log costs Redis (benchmarks.md, 2026-12-03): the record
script (PUT) now notes each record's window (the state's first_end) and logs the
windows in alert (a zset per stream, the last ALERT_LOG_LEN).

    PYTHONPATH=. python docs/notebook/bench/alert_log.py   # needs redis-server

Starts a redis-server on a free loopback port. 1,000 streams per variant, each with
its state (epoch, recent novelty) and a risk history growing to 50 records: 50
rounds, each one pipeline of one record-script call per stream (one record each, a
550-byte JSON record like the scorer's), the variants alternated round by round:
the script before the alert log (BEFORE, the record script of 52ebbad verbatim), the
shipped one with no window in alert (the common case), and the shipped one with
every window in alert (each call also adds to the stream's log). Redis' own time per
call from INFO commandstats (CONFIG RESETSTAT before each round), the median over
the rounds; then MEMORY USAGE of one stream's full log (ALERT_LOG_LEN windows); then
a scrape's read of a tenant's incidents (RedisStore.incident_outcomes and their tally,
as GET /metrics does) with 10, 1,000 and INCIDENTS_KEPT of them reported, timed from
the client, the median of 20, and their keys' MEMORY USAGE.
"""

import json
import platform
import statistics
import time
from pathlib import Path

import redis
from summary_in_alert import on_redis

from service import incidents
from service.schemas import Incident
from service.store import ALERT_LOG_LEN, INCIDENTS_KEPT, IncidentRow
from service.store.redis_store import PUT, RedisStore

STREAMS, ROUNDS, HISTORY, TTL = 1000, 50, 500, 3600
BEFORE = """
local key, out = KEYS[1], {}
local epoch = redis.call('HGET', KEYS[2], 'epoch')
if not epoch and redis.call('EXISTS', KEYS[2]) == 1 then epoch = '0' end  -- pre-epoch
if epoch ~= ARGV[3] then  -- another epoch, or no state: forgotten
  for i = 4, #ARGV, 3 do out[#out + 1] = 0 end
  return {out, false, false, false}
end
local recent, noted = tonumber(redis.call('HGET', KEYS[2], 'novelty') or ''), false
for i = 4, #ARGV, 3 do
  if redis.call('ZCOUNT', key, ARGV[i], ARGV[i]) == 0 then
    redis.call('ZADD', key, ARGV[i], ARGV[i + 1])
    out[#out + 1] = 1
    local v = tonumber(ARGV[i + 2])
    if v then
      recent = recent or 0.5
      recent = recent + 0.03278688524590164 * (v - recent)
    else recent = nil end
    noted = true
  else
    out[#out + 1] = 0
  end
end
redis.call('ZREMRANGEBYRANK', key, 0, -tonumber(ARGV[1]) - 1)
redis.call('EXPIRE', key, ARGV[2])
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
"""
RECORD = json.dumps({"pad": "x" * 500})  # about a scorer's record's size


def cpu() -> str:
    with open("/proc/cpuinfo") as f:
        names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    return names[0] if names else platform.processor()


def args_of(variant: str, n: int) -> list[object]:
    """One record of window n (a window of 100 one-second readings)."""
    head: list[object] = [HISTORY, TTL, "1", n, RECORD, "0.5"]
    if variant == "before":
        return head
    # the window's risk when in alert (its log entry's), else '' (since 2026-12-03's
    # forty-second session; '1' or '0' before)
    alert = (
        repr(0.9561049938201904) if variant == "after, every window in alert" else ""
    )
    return [*head, repr(1e9 + n - 100.0), repr(1e9 + n - 1.0), alert]


async def main(port: int) -> None:
    r = redis.Redis(port=port)
    scripts = {
        "before": r.register_script(BEFORE),
        "after, no window in alert": r.register_script(PUT),
        "after, every window in alert": r.register_script(PUT),
    }
    keys = {
        v: [[f"{i}:{{p{s}}}:{k}" for k in ("risk", "state", "alerts")]
            for s in range(STREAMS)]
        for i, v in enumerate(scripts)
    }  # fmt: skip
    pipe = r.pipeline(transaction=False)
    for v in scripts:
        for _, state, _ in keys[v]:
            pipe.hset(state, mapping={"epoch": "1", "novelty": "0.5", "n": "0"})
    pipe.execute()
    usec: dict[str, list[float]] = {v: [] for v in scripts}
    for k in range(ROUNDS):
        n = 100 + 5 * k
        for v, script in scripts.items():
            r.config_resetstat()
            pipe = r.pipeline(transaction=False)
            for ks in keys[v]:
                script(keys=ks if v != "before" else ks[:2], args=args_of(v, n),
                       client=pipe)  # fmt: skip
            pipe.execute()
            usec[v].append(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])
    base = statistics.median(usec["before"])
    for v, us in usec.items():
        m = statistics.median(us)
        print(f"record script, {v}: {m:.2f} µs of Redis a call ({m / base:.2f}x)")
    log = "bench:{p0}:full:alerts"
    pipe = r.pipeline(transaction=False)
    for n in range(100, 100 + 5 * ALERT_LOG_LEN, 5):
        entry = f"{n} {1e9 + n - 100.0!r} {1e9 + n - 1.0!r} {0.9561049938201904!r}"
        pipe.zadd(log, {entry: n})
    pipe.execute()
    held = r.memory_usage(log, samples=0)
    print(f"a full alert log ({ALERT_LOG_LEN} windows): {held / 1e3:.0f} kB, "
          f"{held / ALERT_LOG_LEN:.0f} B a window")  # fmt: skip
    store = RedisStore(f"redis://127.0.0.1:{port}/0", prefix="inc", ttl_s=TTL,
                       history_len=10, dedupe_horizon=100, timeout_s=5.0)  # fmt: skip
    now, reported = time.time(), 0
    for count in (10, 1000, INCIDENTS_KEPT):
        for i in range(reported, count):
            rec = Incident(id=f"INC-{i}", stream=f"pump-{i % 100}", start=1e9 + i,
                           end=1e9 + i + 60, outcome="warned", lead_s=120.0,
                           lead_readings=120, alert_window_end=1e9 + i - 120,
                           lookback=200, reported_at=now)  # fmt: skip
            row = IncidentRow(rec.id, now, rec.model_dump_json(), "warned", 120.0)
            await store.put_incident("acme", row)
        reported = count
        ts = []
        for _ in range(20):
            t0 = time.perf_counter()
            (got,) = await store.incident_outcomes(["acme"], now - incidents.SPAN_S)
            incidents.tally(got)
            ts.append(time.perf_counter() - t0)
        print(f"a scrape's read of a tenant's {count} incidents: "
              f"{1e3 * statistics.median(ts):.2f} ms")  # fmt: skip
    held = sum(
        r.memory_usage(store._tenant("acme", k), samples=0)
        for k in ("incidents", "incidents_at", "incidents_of")
    )
    print(f"a tenant's {INCIDENTS_KEPT} incidents: {held / INCIDENTS_KEPT:.0f} B each")
    await store.close()


if __name__ == "__main__":
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"CPU: {cpu()}; load: {load}")
    t0 = time.perf_counter()
    on_redis(main)
    print(f"{time.perf_counter() - t0:.0f} s")
