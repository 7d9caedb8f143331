"""GET /ui: a small built-in live page (no build step, no CDN, works offline); GET /
redirects there. One self-contained HTML document, inline so that any install of the
package serves it; every 1.5 s it reads /models, /streams (the tenant's streams by
name; with more than 25, /streams/top: the 25 at highest risk) and each stream's /risk
and history and draws risk against threshold, alert state and a sparkline. With API keys
set, open ``/ui#key=YOUR_KEY`` (a fragment never reaches the server or its logs).
"""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse

from service.deps import ModelDep

router = APIRouter(tags=["ui"])

HISTORY = 120  # scored windows per sparkline

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>SC-JEPA risk</title>
<style>
  :root { --bg:#0f1419; --card:#182028; --fg:#e6e9ec; --dim:#8a96a3; --line:#2a3540;
          --ok:#2ea043; --alert:#e5534b; --risk:#4aa3ff; --thr:#d29922; }
  * { box-sizing: border-box; }
  body { margin:0; background:var(--bg); color:var(--fg);
         font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
  header { display:flex; align-items:baseline; gap:6px 16px; flex-wrap:wrap;
           padding:14px 24px; border-bottom:1px solid var(--line); }
  header #conn { margin-left:auto; }
  header h1 { font-size:18px; margin:0; }
  header .dim { color:var(--dim); }
  #conn.bad { color:var(--alert); }
  main { padding:16px 24px; display:grid; gap:14px;
         grid-template-columns:repeat(auto-fill, minmax(520px, 1fr)); }
  .stream { background:var(--card); border:1px solid var(--line); border-radius:8px;
            padding:12px 14px; }
  .stream[data-alert="true"] { border-color:var(--alert); }
  .top { display:flex; align-items:center; gap:12px; }
  .name { font-weight:600; font-size:16px; flex:1; overflow:hidden;
          text-overflow:ellipsis; white-space:nowrap; }
  .risk { font-variant-numeric:tabular-nums; font-size:20px; font-weight:600; }
  .thr { color:var(--dim); font-variant-numeric:tabular-nums; }
  .badge { border-radius:999px; padding:2px 10px; font-weight:700; font-size:12px;
           letter-spacing:.04em; }
  .badge.ok { background:rgba(46,160,67,.18); color:var(--ok); }
  .badge.alert { background:var(--alert); color:#fff; }
  .badge.warming { background:var(--line); color:var(--dim); }
  svg.spark { width:100%; height:90px; display:block; margin-top:8px; }
  svg.spark .frame { fill:none; stroke:var(--line); }
  svg.spark polyline { fill:none; stroke:var(--risk); stroke-width:1.8;
                       vector-effect:non-scaling-stroke; }
  svg.spark line.threshold { stroke:var(--thr); stroke-dasharray:4 3;
                             vector-effect:non-scaling-stroke; }
  svg.spark rect.hot { fill:var(--alert); opacity:.28; }
  .meta { color:var(--dim); font-size:12px; margin-top:6px; display:flex;
          gap:2px 14px; flex-wrap:wrap; }
  #empty { color:var(--dim); padding:24px; }
  .legend span { margin-right:12px; }
  .sw { display:inline-block; width:14px; height:0; vertical-align:middle;
        border-top:2px solid var(--risk); margin-right:4px; }
  .sw.t { border-top:2px dashed var(--thr); }
  .sw.a { height:10px; border:0; background:var(--alert); opacity:.45; }
</style>
</head>
<body>
<header>
  <h1>SC-JEPA risk</h1>
  <span class="dim">__WHAT__</span>
  <span id="model" class="dim"></span>
  <span class="dim legend"><span><i class="sw"></i>risk per scored window</span><span><i class="sw t"></i>threshold</span><span><i class="sw a"></i>in alert</span></span>
  <span id="conn" class="dim">connecting…</span>
</header>
<main id="streams"><div id="empty">No streams yet: POST readings to /ingest.</div></main>
<script>
"use strict";
const HISTORY = __HISTORY__;
const REFRESH_MS = 1500;
const key = new URLSearchParams(location.hash.slice(1)).get("key");
const headers = key ? {"X-API-Key": key} : {};
const svgNS = "http://www.w3.org/2000/svg";

async function getJSON(path) {
  const r = await fetch(path, {headers, cache: "no-store"});
  if (!r.ok) {
    const e = new Error(path + " -> " + r.status);
    e.status = r.status;
    throw e;
  }
  return r.json();
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function card(name) {
  const c = el("section", "stream");
  c.dataset.stream = name;
  const top = el("div", "top");
  top.append(el("span", "name", name), el("span", "risk", "–"), el("span", "thr", ""),
             el("span", "badge warming", "…"));
  const svg = svgEl("svg", {class: "spark", viewBox: "0 0 100 40",
                            preserveAspectRatio: "none"});
  c.append(top, svg, el("div", "meta"));
  return c;
}

function drawSpark(svg, items, threshold) {
  svg.replaceChildren();
  svg.append(svgEl("rect", {class: "frame", x: 0, y: 0, width: 100, height: 40}));
  // from 0 to twice the threshold (or the highest risk shown), at most 1
  const top = Math.min(1, Math.max(2 * threshold, ...items.map(it => it.risk * 1.05))) || 1;
  const y = v => 40 - 38 * Math.min(Math.max(v / top, 0), 1) - 1;
  svg.append(svgEl("line", {class: "threshold", x1: 0, x2: 100,
                            y1: y(threshold), y2: y(threshold)}));
  const n = items.length;
  if (!n) return top;
  const x = i => (i * 100) / Math.max(n - 1, 29);  // left to right, >= 30 slots
  const slot = 100 / Math.max(n - 1, 29);
  items.forEach((it, i) => {  // a red band behind each window in alert
    if (it.alert) svg.append(svgEl("rect", {class: "hot", x: Math.max(x(i) - slot / 2, 0),
                                            y: 0, width: slot, height: 40}));
  });
  const pts = items.map((it, i) => x(i).toFixed(2) + "," + y(it.risk).toFixed(2));
  svg.append(svgEl("polyline", {points: pts.join(" ")}));
  return top;
}

function render(c, cur, hist) {
  const [_, riskEl, thrEl, badge] = c.querySelector(".top").children;
  const items = hist.items.slice().reverse();  // oldest first
  const alert = cur.status === "ok" && cur.alert === true;
  c.dataset.alert = String(alert);
  c.dataset.status = cur.status;
  thrEl.textContent = "threshold " + cur.threshold.toFixed(3);
  if (cur.status === "ok") {
    riskEl.textContent = cur.risk.toFixed(3);
    badge.className = "badge " + (alert ? "alert" : "ok");
    badge.textContent = alert ? "ALERT" : "OK";
  } else {
    riskEl.textContent = "–";
    badge.className = "badge warming";
    badge.textContent = "WARMING UP " + Math.round(100 * cur.progress) + "%";
  }
  const top = drawSpark(c.querySelector("svg"), items, cur.threshold);
  const meta = c.querySelector(".meta");
  const alerts = items.filter(it => it.alert).length;
  const parts = [items.length + " windows scored", alerts + " in alert",
                 cur.readings_total + " readings", "chart: risk 0 to " + top.toFixed(2)];
  // the input-drift monitor: how unlike the training data's normal windows the
  // latest window is, and the stream's recent windows (null without one)
  for (const [key, label] of [["novelty", "novelty"], ["recent_novelty", "recent novelty"]]) {
    if (cur[key] !== null && cur[key] !== undefined) {
      parts.push(label + " " + cur[key].toFixed(2));
    }
  }
  if (cur.top_channels && cur.top_channels.length) {
    parts.push("top channels: " + cur.top_channels.slice(0, 3)
      .map(t => t.name + " " + Math.round(100 * t.share) + "%").join(", "));
  }
  meta.replaceChildren(...parts.map(p => el("span", "", p)));
}

// the page's requests per refresh grow with the streams it shows (2 per stream): it
// shows every stream, by name, up to STREAMS_PER_REFRESH, and past that the
// STREAMS_PER_REFRESH streams at highest risk, highest first (streams not scored yet
// are then left out), so that it keeps to about 3 + STREAMS_PER_REFRESH * 2 requests
// per refresh on its key; after a 429 it waits twice as long (up to a minute) and
// keeps every card as it was
const STREAMS_PER_REFRESH = 25;
let nextMs = REFRESH_MS;

async function refresh() {
  const conn = document.getElementById("conn");
  let limited = false;
  try {
    const [models, streams, top] = await Promise.all([
      getJSON("/models"), getJSON("/streams?limit=" + (STREAMS_PER_REFRESH + 1)),
      getJSON("/streams/top?limit=" + STREAMS_PER_REFRESH)]);
    const m = models.models[0];
    document.getElementById("model").textContent =
      "model " + m.manifest.name + " " + m.manifest.version + " · " + m.provider;
    const main = document.getElementById("streams");
    const many = streams.streams.length > STREAMS_PER_REFRESH;
    const names = many ? top.streams.map(s => s.stream) : streams.streams.slice().sort();
    document.getElementById("empty")?.remove();
    if (!names.length) main.replaceChildren(el("div", "", "No streams yet: POST readings to /ingest."));
    // null: the stream expired (404); undefined: not read this time (429, a
    // network error): its card stays as it was
    const miss = e => { if (e.status === 429) limited = true;
                        return e.status === 404 ? null : undefined; };
    const data = await Promise.all(names.map(s => Promise.all([
      getJSON("/risk/" + encodeURIComponent(s)).catch(miss),
      getJSON("/risk/" + encodeURIComponent(s) + "/history?limit=" + HISTORY)
        .catch(e => e.status === 404 ? {items: []} : miss(e)),  // 404: warming up
    ])));
    const gone = new Set(names.filter((s, i) => data[i][0] === null));
    for (const c of [...main.querySelectorAll("section.stream")])
      if (!names.includes(c.dataset.stream) || gone.has(c.dataset.stream)) c.remove();
    names.forEach((s, i) => {
      if (gone.has(s)) return;
      let c = [...main.querySelectorAll("section.stream")].find(e => e.dataset.stream === s);
      const [cur, hist] = data[i];
      if (!c && (cur === undefined || hist === undefined)) return;  // next time
      if (!c) { c = card(s); }
      main.append(c);  // keeps the order of names
      if (cur !== undefined && hist !== undefined) render(c, cur, hist);
    });
    nextMs = REFRESH_MS;
    conn.className = limited ? "bad" : "dim";
    conn.textContent = (limited ? "rate limited (429): some streams not updated; " : "")
      + (many ? "the " + names.length + " streams at highest risk, of more; " : "")
      + "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    limited = limited || e.status === 429;
    conn.className = "bad";
    conn.textContent = limited
      ? "rate limited (429): this key's requests are over SCJEPA_RATE_LIMIT_RPS; retrying"
      : "cannot reach the service (" + e.message + ")";
  }
  if (limited) nextMs = Math.min(60000, 2 * nextMs);
  setTimeout(refresh, nextMs);
}

refresh();  // then again as each refresh schedules the next
</script>
</body>
</html>
""".replace("__HISTORY__", str(HISTORY))


@cache
def page(window: int, label_free: bool = False) -> str:
    """The page for a model that scores windows of ``window`` readings; a label-free
    one (`scjepa calibrate`) serves how rare a window is, not the next one's risk."""
    what = (
        f"how rare each {window}-step window is among normal ones (a label-free "
        "model: it detects, it does not predict)"
        if label_free
        else f"risk that the <b>next</b> {window}-step window holds an anomaly"
    )
    return PAGE.replace("__WHAT__", what)


@router.get("/ui", response_class=HTMLResponse, include_in_schema=False)
async def ui(model: ModelDep) -> HTMLResponse:
    """The live page: streams, risk sparklines, threshold, alert state."""
    label_free = "label_free" in model.manifest.eval_metrics
    return HTMLResponse(
        page(model.window, label_free), headers={"Cache-Control": "no-store"}
    )


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    """A browser opening the service's address lands on the live page."""
    return RedirectResponse("/ui")
