"""Per-stream risk alerts, posted to Alertmanager (its v2 API, ``POST /api/v2/alerts``).

A stream ENTERS alert when ``windows`` consecutive scored windows are at or above the
model's threshold (SCJEPA_ALERT_WINDOWS, default 1): one alert is posted, labelled with
the tenant and the stream (Alertmanager deduplicates and groups by labels) and annotated
with the model, the risk, the threshold and the top channels. While the stream stays in
alert the alert is posted again every ``resend_s`` (on its next window) with ``endsAt``
``hold_s`` ahead, so Alertmanager keeps it firing; ``clear`` consecutive windows below the
threshold (SCJEPA_ALERT_CLEAR_WINDOWS, default 1: the first one) post it RESOLVED
(``endsAt`` = now), so a risk hovering at the threshold can be kept from flapping. A
stream that stops sending while in alert is resolved by Alertmanager itself when
``endsAt`` passes.

Several scorer processes: the per-stream state (the stream's epoch and last window
number seen, the run of windows in alert, firing or not, when last posted, the windows
below since) lives in Redis and is stepped by one Lua script per window, atomically, so
two scorers never both open (or both resolve) a stream's alert, and a window older than
the last one seen (another scorer's, claimed late) changes nothing. Without Redis (the
in-memory store: one process) the same steps run on a dict, whose states idle past
``ttl_s`` are dropped. A stream never in alert keeps no state; one that has been keeps
its last window number after its run ends (until ``ttl_s`` after its last window), so a
window of an ended run, scored again late, cannot start that run again and reopen its
alert.

A stream that STARTS OVER (its window numbers begin again at the first window: a model
of another layout under SCJEPA_LAYOUT_CHANGE=fresh, or the stream forgotten after
SCJEPA_STREAM_TTL_S idle and sending again) has a new *epoch*, given by the store when
the stream's state is created (:attr:`service.store.WorkItem.epoch`, later for each new
start): windows are ordered by (epoch, n), so the first window of the new epoch starts
a fresh state (the old one is not consulted: its window numbers mean nothing now) and
a window of the old epoch scored late changes nothing. A stream FIRING when it starts
over gets its alert RESOLVED by that first window (the incident was about readings the
service no longer holds); the new readings must then put it in alert again (``windows``
windows; with ``windows`` = 1 and that window at/above the threshold it fires again at
once: the resolve and the new alert are posted together, in that order).

A stream DELETED (``DELETE /streams/{stream}``) has its alert closed by the API
process that deleted it (:meth:`Alerter.deleted`): its state is replaced, atomically,
by a closed one at the deleted life's epoch and the last window number there can be,
so a window of that life scored late (claimed, or held by a scorer during the delete)
changes nothing, and the stream's next life (a later epoch) starts fresh as above; a
firing alert is posted RESOLVED at once. Only a state of that epoch or earlier is
closed: one of a later life (the name sent again meanwhile) is left as it is.

A window is stepped once per scorer that wrote its record, and again when a window
claimed from a scorer that failed between writing its record and acknowledging it is
scored again (:mod:`service.worker`): (epoch, n) at or below the state's changes
nothing, so hearing of a window twice is harmless.

Never in scoring's way: the scorer's listener only queues the batch (a bounded queue;
a full one drops the batch, counted); a background task steps the state and hands the
alerts to a second bounded queue, whose task posts them with a timeout. Posting
failures are counted (``scjepa_alert_posts_total{outcome}``) and logged, not retried:
a lost "firing" post is sent again on the stream's next window past ``resend_s``; a
lost "resolved" one ends at its ``endsAt``.

    worker.listeners.extend(alerting.listeners(settings))   # roles scorer and all
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import httpx
from prometheus_client import Counter

from service import metrics
from service.config import Settings
from service.worker import ScoredWindow

log = logging.getLogger(__name__)

ALERTNAME = "ScjepaStreamRisk"
# actions of one step (the Lua script returns the same numbers), plus RESTART: a flag
# added when the window started its stream over while its alert was firing (that
# alert is resolved first): 4 (nothing else) or 5 (and FIRE, for the new epoch)
NONE, FIRE, REFRESH, RESOLVE = 0, 1, 2, 3
RESTART = 4
EVENTS = dict(zip((FIRE, REFRESH, RESOLVE), metrics.ALERT_EVENTS, strict=True))
CONNECTIONS = 8  # the alerter's Redis connections (per node on a Cluster)

ALERT_POSTS = Counter(
    "scjepa_alert_posts",
    "Alerts handed to Alertmanager, by outcome: ok, failed (error or timeout), "
    "dropped (a queue was full: Alertmanager or the state store too slow).",
    ["outcome"],
)
for _outcome in ("ok", "failed", "dropped"):
    ALERT_POSTS.labels(outcome=_outcome)


@dataclass(frozen=True)
class Policy:
    url: str  # Alertmanager's base URL, e.g. http://alertmanager:9093
    windows: int = 1  # consecutive windows at/above threshold to enter alert
    clear: int = 1  # consecutive windows below it that resolve a firing alert
    resend_s: float = 60.0  # a firing alert is posted again this often
    hold_s: float = 600.0  # endsAt of a firing post: now + hold_s
    timeout_s: float = 2.0  # one POST to Alertmanager
    queue: int = 1000  # batches (and then alerts) waiting; past it: dropped
    ttl_s: int = 7 * 24 * 3600  # a stream's alert state expires with the stream
    # (after this long without a window: Redis' EXPIRE, MemoryStates' pruning)

    def __post_init__(self) -> None:
        if (
            min(self.windows, self.clear, self.queue) < 1
            or self.hold_s <= self.resend_s
        ):
            raise ValueError(
                "alerting: windows, clear, queue >= 1 and hold_s > resend_s needed (got "
                f"{self.windows}, {self.clear}, {self.queue}, {self.hold_s}, "
                f"{self.resend_s})"
            )


# --------------------------------------------------------------------- state steps


@dataclass
class State:
    n: int  # the last window number seen
    run: int  # consecutive windows at/above threshold, up to n
    firing: bool
    sent: float  # when last posted (time.time())
    below: int = 0  # consecutive windows below the threshold while firing
    epoch: int = 0  # the stream's epoch of window n (0: before epochs were kept)


def step(
    state: State | None,
    n: int,
    alert: bool,
    now: float,
    policy: Policy,
    epoch: int = 0,
) -> tuple[State | None, int]:
    """One window's effect on a stream's alert state: (new state, action). The new
    state is None only for a stream never in alert: once in a run, the last window
    number is kept, so a late window of an ended run changes nothing. Windows are
    ordered by (epoch, n): a window of a later epoch (the stream started over) steps
    a fresh state, the action flagged RESTART when the old state was firing (its
    alert is resolved); one at or before the state's changes nothing."""
    restart = NONE
    if state is not None:
        if (epoch, n) <= (state.epoch, state.n):
            return state, NONE  # older than what was seen: another scorer's, late
        if epoch > state.epoch:  # the stream started over: its old state is void
            restart = RESTART if state.firing else NONE
            state = State(n, 0, False, 0.0, 0, epoch)
    if state is None and not alert:
        return None, NONE
    run = state.run if state is not None else 0
    firing = state.firing if state is not None else False
    sent = state.sent if state is not None else 0.0
    below = state.below if state is not None else 0
    action = NONE
    if alert:
        run, below = run + 1, 0
        if firing and now - sent >= policy.resend_s:
            action, sent = REFRESH, now
        elif not firing and run >= policy.windows:
            action, firing, sent = FIRE, True, now
    else:
        run = 0
        if firing:
            below += 1
            if below >= policy.clear:
                action, firing, below = RESOLVE, False, 0
            elif now - sent >= policy.resend_s:  # held firing: keep it alive
                action, sent = REFRESH, now
    return State(n, run, firing, sent, below, epoch), action + restart


# the same step on a Redis hash, atomically (KEYS[1]: the stream's state;
# ARGV: n, alert 0/1, windows, now, resend_s, ttl_s, clear, epoch). A window at or
# before the state's (epoch, n) changes nothing but the TTL (the stream is alive).
STEP_LUA = """
local s = redis.call('HMGET', KEYS[1], 'n', 'run', 'firing', 'sent', 'below', 'epoch')
local n, epoch = tonumber(ARGV[1]), tonumber(ARGV[8])
local had, restart = s[1], 0
if had then
  local e = tonumber(s[6]) or 0
  if epoch < e or (epoch == e and n <= tonumber(s[1])) then
    redis.call('EXPIRE', KEYS[1], ARGV[6])
    return 0
  end
  if epoch > e then  -- the stream started over: its old state is void
    if s[3] == '1' then restart = 4 end
    s = {}
  end
end
local run = tonumber(s[2]) or 0
local firing = s[3] == '1'
local sent = tonumber(s[4]) or 0
local below = tonumber(s[5]) or 0
local now = tonumber(ARGV[4])
local action = 0
if ARGV[2] == '1' then
  run = run + 1; below = 0
  if firing and now - sent >= tonumber(ARGV[5]) then
    action = 2; sent = now
  elseif (not firing) and run >= tonumber(ARGV[3]) then
    action = 1; firing = true; sent = now
  end
else
  run = 0
  if firing then
    below = below + 1
    if below >= tonumber(ARGV[7]) then
      action = 3; firing = false; below = 0
    elseif now - sent >= tonumber(ARGV[5]) then
      action = 2; sent = now
    end
  end
end
if run == 0 and not had then return action end  -- never in alert: no state
redis.call('HSET', KEYS[1], 'n', n, 'run', run, 'firing', firing and 1 or 0,
           'sent', tostring(sent), 'below', below, 'epoch', ARGV[8])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return action + restart
"""

# KEYS[1]: the stream's state; ARGV: the deleted life's epoch, CLOSED, ttl_s. Closes
# the state unless a later life's; returns 1 when it was firing (to resolve), else 0.
FORGET_LUA = """
local s = redis.call('HMGET', KEYS[1], 'firing', 'epoch')
if s[1] and (tonumber(s[2]) or 0) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'n', ARGV[2], 'run', 0, 'firing', 0, 'sent', 0,
           'below', 0, 'epoch', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return s[1] == '1' and 1 or 0
"""
CLOSED = 2**53  # a closed state's window number: past any real window of its epoch


class States(Protocol):
    """Where the per-stream states live: stepped per window, closed per deletion."""

    async def __call__(
        self, windows: Sequence[ScoredWindow], now: float
    ) -> list[int]: ...

    async def forget(self, tenant: str, stream: str, epoch: int, now: float) -> bool:
        """Close the stream's state for its life ``epoch`` (deleted); True when it
        was firing."""
        ...


class MemoryStates:
    """The per-stream states of one process (the in-memory store). A state not
    stepped for ``policy.ttl_s`` is dropped (its stream is gone, or will start over
    with a new epoch), oldest first as windows come: the dict holds only the states
    of streams alive within the TTL."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        # oldest step first: (tenant, stream) -> state; when each was last stepped
        self.states: OrderedDict[tuple[str, str], State] = OrderedDict()
        self.stepped: dict[tuple[str, str], float] = {}

    def _expire(self, now: float) -> None:
        cutoff = now - self.policy.ttl_s
        while self.states:
            key = next(iter(self.states))
            if self.stepped[key] >= cutoff:
                break
            del self.states[key], self.stepped[key]

    async def __call__(self, windows: Sequence[ScoredWindow], now: float) -> list[int]:
        self._expire(now)
        actions = []
        for w in windows:
            key = (w.tenant, w.stream)
            new, action = step(self.states.get(key), w.window_n, w.alert, now,
                               self.policy, w.epoch)  # fmt: skip
            if new is None:
                self.states.pop(key, None)
                self.stepped.pop(key, None)
            else:
                self.states[key] = new
                self.states.move_to_end(key)
                self.stepped[key] = now
            actions.append(action)
        return actions

    async def forget(self, tenant: str, stream: str, epoch: int, now: float) -> bool:
        key = (tenant, stream)
        old = self.states.get(key)
        if old is not None and old.epoch > epoch:  # a later life's: not deleted
            return False
        self.states[key] = State(CLOSED, 0, False, 0.0, 0, epoch)
        self.states.move_to_end(key)
        self.stepped[key] = now
        return old is not None and old.firing


class RedisStates:
    """The per-stream states in Redis, shared by every scorer process: one script call
    per window. On one Redis the calls of a batch go in one pipeline (one round trip);
    a Redis Cluster's pipeline takes no scripts, so there each stream's calls run in
    turn (in window order) and the streams concurrently, at most ``concurrency`` at
    once (the client's per-node connection limit: past it the cluster client fails
    instead of waiting)."""

    def __init__(
        self,
        client: Any,
        prefix: str,
        policy: Policy,
        *,
        concurrency: int = CONNECTIONS,
    ) -> None:
        from redis.asyncio.cluster import RedisCluster

        self.client = client
        self.prefix = prefix
        self.policy = policy
        self.script = client.register_script(STEP_LUA)
        self.forget_script = client.register_script(FORGET_LUA)
        self.cluster = isinstance(client, RedisCluster)
        self.concurrency = concurrency

    def key(self, tenant: str, stream: str) -> str:
        # one key per stream, no hash tag: a Redis Cluster spreads them (152 B each,
        # only for streams that have had a window in alert within ttl_s)
        return f"{self.prefix}:alert:{tenant}/{stream}"

    async def __call__(self, windows: Sequence[ScoredWindow], now: float) -> list[int]:
        p = self.policy
        calls = [
            (
                self.key(w.tenant, w.stream),
                [
                    w.window_n,
                    int(w.alert),
                    p.windows,
                    repr(now),
                    p.resend_s,
                    p.ttl_s,
                    p.clear,
                    w.epoch,
                ],
            )
            for w in windows
        ]
        if self.cluster:
            return await self._concurrent(calls)
        pipe = self.client.pipeline(transaction=False)
        for key, args in calls:
            await self.script(keys=[key], args=args, client=pipe)
        return [int(a) for a in await pipe.execute()]

    async def forget(self, tenant: str, stream: str, epoch: int, now: float) -> bool:
        if self.cluster:
            await self.client.initialize()  # the slot map first, as _concurrent
        key, args = self.key(tenant, stream), [epoch, CLOSED, self.policy.ttl_s]
        return bool(await self.forget_script(keys=[key], args=args))

    async def _concurrent(self, calls: list[tuple[str, list[Any]]]) -> list[int]:
        by_key: dict[str, list[int]] = {}
        for i, (key, _) in enumerate(calls):
            by_key.setdefault(key, []).append(i)
        out = [NONE] * len(calls)
        gate = asyncio.Semaphore(self.concurrency)

        async def stream(indices: list[int]) -> None:
            async with gate:
                for i in indices:  # one stream's windows in order: a later one first
                    key, args = calls[i]  # would make the earlier one "late"
                    out[i] = int(await self.script(keys=[key], args=args))

        # the slot map first (a flag test once loaded): redis-py routes calls sent
        # before it is known to any node, and the MOVED replies reset connections
        # that the other calls are using
        await self.client.initialize()
        await asyncio.gather(*(stream(ix) for ix in by_key.values()))
        return out

    async def close(self) -> None:
        await self.client.aclose()


# ------------------------------------------------------------------------ alerts


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def _labels(tenant: str, stream: str) -> dict[str, str]:
    """What Alertmanager tells a stream's alert by: every post of it carries these."""
    return {
        "alertname": ALERTNAME,
        "severity": "warning",
        "tenant": tenant,
        "stream": stream,
    }


def deleted_payload(tenant: str, stream: str, now: float) -> dict[str, Any]:
    """The RESOLVED post of a firing stream deleted by DELETE /streams/{stream}."""
    return {
        "labels": _labels(tenant, stream),
        "annotations": {
            "summary": f"stream {stream} (tenant {tenant}) was deleted: its alert is "
            "resolved",
            "description": "DELETE /streams/{stream} removed the stream's readings, "
            "risks and alert state; it alerts again only once it sends readings "
            "again and they are at or above the threshold.",
        },
        "endsAt": _iso(now),
    }


def payload(w: ScoredWindow, action: int, now: float, policy: Policy) -> dict[str, Any]:
    """One alert of Alertmanager's v2 API for a window whose step fired, refreshed or
    resolved its stream's alert (RESTART: resolved because the stream started over)."""
    top = ", ".join(f"{c.name} {c.share:.0%}" for c in w.top_channels)
    model = f"{w.model.name} {w.model.version}"
    where = "back below" if action == RESOLVE else "at or above"
    summary = (
        f"stream {w.stream} (tenant {w.tenant}): risk {w.risk:.3f} {where} the "
        f"threshold {w.threshold:.3f}"
    )
    description = (
        f"{policy.windows} consecutive windows at or above the threshold "
        f"opened this alert; latest window n={w.window_n} ending at ts "
        f"{w.window_end}. Top channels: {top or 'none'}. Model {model}. "
        f"GET /risk/{w.stream} for the latest risk."
    )
    if action == RESTART:
        summary = (
            f"stream {w.stream} (tenant {w.tenant}) started over: the alert of its "
            "earlier readings is resolved"
        )
        description = (
            "The stream's readings were started over (a model of another layout "
            "under SCJEPA_LAYOUT_CHANGE=fresh, or the stream idle past "
            f"SCJEPA_STREAM_TTL_S); its first window since, n={w.window_n} ending at "
            f"ts {w.window_end}, has risk {w.risk:.3f}. It alerts again once "
            f"{policy.windows} consecutive windows of the new readings are at or "
            f"above the threshold. Model {model}."
        )
    return {
        "labels": _labels(w.tenant, w.stream),
        "annotations": {
            "summary": summary,
            "description": description,
            "risk": f"{w.risk:.4f}",
            "threshold": f"{w.threshold:.4f}",
            "model": model,
            "top_channels": top,
            "window_n": str(w.window_n),
        }
        | ({"evaluated": w.evaluated} if w.evaluated else {}),
        "endsAt": _iso(now if action in (RESOLVE, RESTART) else now + policy.hold_s),
    }


class Alerter:
    """The scorer's listener: ``await alerter(windows)`` queues them and returns."""

    def __init__(
        self,
        policy: Policy,
        states: States,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.states = states
        self.clock = clock
        self.windows: asyncio.Queue[Sequence[ScoredWindow]] = asyncio.Queue(
            policy.queue
        )
        self.alerts: asyncio.Queue[dict[str, Any]] = asyncio.Queue(policy.queue)
        self.http = httpx.AsyncClient(timeout=policy.timeout_s)
        self.endpoint = policy.url.rstrip("/") + "/api/v2/alerts"
        self._tasks: list[asyncio.Task[None]] = []

    def _start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._step(), name="alerting-state"),
                asyncio.create_task(self._post(), name="alerting-post"),
            ]

    async def __call__(self, windows: Sequence[ScoredWindow]) -> None:
        self._start()
        try:
            self.windows.put_nowait(windows)
        except asyncio.QueueFull:
            ALERT_POSTS.labels(outcome="dropped").inc(len(windows))
            log.warning("alerting: queue full, %d windows not checked", len(windows))

    async def _step(self) -> None:
        while True:
            windows = await self.windows.get()
            now = self.clock()
            try:
                actions = await self.states(windows, now)
            except Exception as e:  # the state store is down: these windows are lost
                ALERT_POSTS.labels(outcome="failed").inc(len(windows))
                log.warning("alerting: state not stepped (%d windows): %s",
                            len(windows), e)  # fmt: skip
                continue
            for w, action in zip(windows, actions, strict=True):
                if action & RESTART:  # started over while firing: resolved first
                    log.info("alerting: stream %s/%s started over while in alert: "
                             "resolved", w.tenant, w.stream)  # fmt: skip
                    self._queue(w, RESTART, "resolve", now)
                    action &= ~RESTART
                if action != NONE:
                    self._queue(w, action, EVENTS[action], now)

    def _queue(self, w: ScoredWindow, action: int, event: str, now: float) -> None:
        self._send(event, payload(w, action, now, self.policy))

    def _send(self, event: str, alert: dict[str, Any]) -> None:
        tenant = alert["labels"]["tenant"]
        metrics.tenant_child(metrics.STREAM_ALERTS, event, tenant).inc()
        try:
            self.alerts.put_nowait(alert)
        except asyncio.QueueFull:
            ALERT_POSTS.labels(outcome="dropped").inc()

    async def deleted(self, tenant: str, stream: str, epoch: int) -> None:
        """The stream's life ``epoch`` was deleted: close its state (a window of it
        scored late alerts no more) and post its firing alert resolved. A failure is
        counted and logged, not raised: the stream is deleted whatever its alert (a
        firing one not resolved here ends at its ``endsAt``)."""
        now = self.clock()
        try:
            firing = await self.states.forget(tenant, stream, epoch, now)
        except Exception as e:
            ALERT_POSTS.labels(outcome="failed").inc()
            log.warning("alerting: state of deleted stream %s/%s not closed: %s",
                        tenant, stream, e)  # fmt: skip
            return
        if firing:
            log.info("alerting: stream %s/%s deleted while in alert: resolved",
                     tenant, stream)  # fmt: skip
            self._start()
            self._send("resolve", deleted_payload(tenant, stream, now))

    async def _post(self) -> None:
        while True:
            batch = [await self.alerts.get()]
            while not self.alerts.empty() and len(batch) < 64:
                batch.append(self.alerts.get_nowait())
            try:
                r = await self.http.post(self.endpoint, json=batch)
                r.raise_for_status()
            except httpx.HTTPError as e:
                ALERT_POSTS.labels(outcome="failed").inc(len(batch))
                log.warning("alerting: %d alerts not posted to %s: %s",
                            len(batch), self.endpoint, e)  # fmt: skip
            else:
                ALERT_POSTS.labels(outcome="ok").inc(len(batch))

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait until what is queued has been stepped and posted (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (
            self.windows.qsize() or self.alerts.qsize()
        ):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the batch in hand

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.drain(1.0)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        await self.http.aclose()
        closer = getattr(self.states, "close", None)
        if closer is not None:
            await closer()


def build(
    url: str | None,
    *,
    redis_url: str | None,
    prefix: str = "scjepa",
    windows: int = 1,
    clear: int = 1,
    resend_s: float = 60.0,
    hold_s: float = 600.0,
    timeout_s: float = 2.0,
    queue: int = 1000,
    ttl_s: int = 7 * 24 * 3600,
    redis_timeout_s: float = 1.0,
) -> Alerter | None:
    """The alerter, or None without an Alertmanager URL (no per-stream alerts)."""
    if not url:
        return None
    policy = Policy(
        url,
        windows=windows,
        clear=clear,
        resend_s=resend_s,
        hold_s=hold_s,
        timeout_s=timeout_s,
        queue=queue,
        ttl_s=ttl_s,
    )
    if not redis_url:
        return Alerter(policy, MemoryStates(policy))
    from service.store.redis_store import connect  # the store's client construction

    client = connect(redis_url, timeout_s=redis_timeout_s, max_connections=CONNECTIONS)
    return Alerter(policy, RedisStates(client, prefix, policy))


def listeners(settings: Settings) -> list[Alerter]:
    """The scorer's listeners for these settings: the alerter when
    SCJEPA_ALERTMANAGER_URL is set, else none (an API process's closes the alerts of
    the streams it deletes)."""
    alerter = build(
        settings.alertmanager_url,
        redis_url=settings.redis_url,
        prefix=settings.key_prefix,
        windows=settings.alert_windows,
        clear=settings.alert_clear_windows,
        resend_s=settings.alert_resend_s,
        hold_s=settings.alert_hold_s,
        timeout_s=settings.alert_timeout_s,
        ttl_s=settings.stream_ttl_s,
        redis_timeout_s=settings.redis_timeout_s,
    )
    return [alerter] if alerter is not None else []
