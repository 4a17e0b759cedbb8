"""The console's one script and one style sheet, served from ``/static`` (the pages have
no inline script, so the Content-Security-Policy can forbid it)."""

from __future__ import annotations

import hashlib

__all__ = ["CACHE_FOREVER", "CONSOLE_CSS", "CONSOLE_JS", "STATIC_VERSION"]

CONSOLE_JS = """\
// Live updates: the server sends whole fragments it rendered (and escaped), or says the
// log changed and the page fetches itself again; this script only swaps the server's
// markup in. No data from the log is ever turned into HTML here.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (!live || !live.dataset.feed || !window.EventSource) return;
  const OFFLINE = "(offline \u2014 retrying)";
  const say = (text) => { if (live.textContent !== text) live.textContent = text; };
  // data-updates counts the swaps, so a test (or a person's script) can wait for one.
  const swap = (element, html) => {
    element.innerHTML = html;
    element.dataset.updates = String(Number(element.dataset.updates || 0) + 1);
  };
  // The parts marked data-live: this page as the server renders it now, swapped in.
  let fetching = false, again = false;
  const refresh = async () => {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      do {
        again = false;
        const response = await fetch(location.href, { cache: "no-store" });
        if (!response.ok) break;
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const element of document.querySelectorAll("[data-live]")) {
          const fresh = page.getElementById(element.id);
          if (fresh && fresh.innerHTML !== element.innerHTML) swap(element, fresh.innerHTML);
        }
      } while (again);
    } catch (error) {
      say(OFFLINE);
    } finally {
      fetching = false;
    }
  };
  // The server speaks at least every few seconds; silence longer than that is a lost feed.
  let quiet = 0, lost = false;
  const heard = () => {
    say("(live)");
    clearTimeout(quiet);
    quiet = setTimeout(() => { lost = true; say(OFFLINE); }, 12000);
    if (lost) { lost = false; refresh(); }
  };
  const offline = () => { clearTimeout(quiet); lost = true; say(OFFLINE); };
  const source = new EventSource(live.dataset.feed);
  source.addEventListener("tree", (e) => {
    heard();
    const tree = document.getElementById("tree");
    if (tree) swap(tree, e.data);
  });
  source.addEventListener("requests", (e) => {
    heard();
    const box = document.getElementById("requests-box");
    if (box) swap(box, e.data);
  });
  source.addEventListener("changed", () => { heard(); refresh(); });
  source.addEventListener("beat", heard);
  source.addEventListener("online", heard);
  source.addEventListener("offline", offline);
  source.onopen = heard;
  source.onerror = offline;
});
// The trace: a selected bar's event comes from the server as an escaped fragment; a live
// run's chart is fetched again each second until the run ends.
document.addEventListener("DOMContentLoaded", () => {
  const trace = document.getElementById("trace");
  const detail = document.getElementById("trace-detail");
  if (!trace || !detail) return;
  let selected = "";
  const show = (bar) => {
    trace.querySelectorAll("g.bar.selected").forEach((g) => g.classList.remove("selected"));
    bar.classList.add("selected");
    selected = bar.id;
    let url = trace.dataset.event + encodeURIComponent(bar.dataset.session) +
      "/event?v=" + encodeURIComponent(bar.dataset.version);
    if (bar.dataset.child) url += "&child=" + encodeURIComponent(bar.dataset.child);
    fetch(url, { credentials: "same-origin" }).then((r) => r.text()).then((html) => {
      detail.innerHTML = html;
      const said = document.getElementById("bar-summary");
      const title = bar.querySelector("title");
      if (said && title) said.textContent = title.textContent;
      detail.dataset.shown = bar.id;
    });
  };
  const pick = (e) => {
    const bar = e.target.closest && e.target.closest("g.bar");
    if (bar) show(bar);
  };
  trace.addEventListener("click", pick);
  trace.addEventListener("keydown", (e) => { if (e.key === "Enter") pick(e); });
  const refresh = () => {
    const url = trace.dataset.refresh;
    fetch(url, { credentials: "same-origin" }).then((r) => r.text()).then((html) => {
      trace.innerHTML = html;
      trace.dataset.updates = String(Number(trace.dataset.updates || 0) + 1);
      const again = selected && document.getElementById(selected);
      if (again) again.classList.add("selected");
      const state = document.getElementById("trace-summary");
      if (state && state.dataset.live === "0") trace.dataset.refresh = "";
      else setTimeout(refresh, 1000);
    }).catch(() => setTimeout(refresh, 2000));
  };
  if (trace.dataset.refresh) setTimeout(refresh, 1000);
});
"""

CONSOLE_CSS = """\
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f7f8fa; }
header { display: flex; gap: 1.5em; align-items: baseline; padding: .6em 1.2em;
  background: #1d2330; color: #e8ebf2; }
header a { color: #e8ebf2; text-decoration: none; margin-right: 1em; }
header .brand { font-weight: 700; }
header .where { margin-left: auto; opacity: .7; font-size: 12px; }
main { padding: 1em 1.5em; max-width: 1200px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 1.4em; }
table { border-collapse: collapse; background: #fff; }
th, td { border-bottom: 1px solid #e3e6ec; padding: .3em .6em; text-align: left;
  vertical-align: top; }
td.data { font-family: ui-monospace, monospace; font-size: 12px;
  max-width: 640px; overflow-wrap: anywhere; }
code { font-family: ui-monospace, monospace; font-size: 12px; }
.dim { color: #6b7280; }
.status { font-weight: 600; padding: 0 .35em; border-radius: 3px; background: #eef0f4; }
.status.running { background: #fff3c4; } .status.completed { background: #d7f5dd; }
.status.failed { background: #ffd9d9; } .status.waiting_for_human { background: #dbe8ff; }
.status.cancelled { background: #f1ddf7; } .status.interrupted { background: #ffe8c7; }
.status.lost { background: #ffd9d9; }
ul.tree, ul.tree ul { list-style: none; padding-left: 1.4em; border-left: 1px dotted #b8bfcc; }
ul.tree li { margin: .25em 0; }
.tools { color: #0e7490; }
ol.transcript li { margin: .4em 0; } .text { white-space: pre-wrap; overflow-wrap: anywhere; }
.call { font-family: ui-monospace, monospace; font-size: 12px; color: #0e7490; }
form.fork { display: inline; } form.fork button { font-size: 11px; }
.flash { padding: .5em .8em; border-radius: 4px; background: #d7f5dd; }
.flash.error { background: #ffd9d9; }
pre.diff { background: #fff; padding: .8em; overflow: auto; }
pre.diff .add { color: #166534; } pre.diff .del { color: #b91c1c; }
.request { background: #fff; padding: .4em .8em; margin: .4em 0; border-left: 3px solid #3b82f6; }
button.danger { color: #b91c1c; }
figure.chart { background: #fff; padding: .6em; margin: 1em 0; display: inline-block; }
ul.legend { list-style: none; display: flex; flex-wrap: wrap; gap: .2em 1.2em; padding: 0;
  margin: .2em 0 0 70px; max-width: 680px; font-size: 11px; }
ul.legend li { white-space: nowrap; } ul.legend svg { vertical-align: -1px; }
table.side-by-side td { font-family: ui-monospace, monospace; font-size: 12px;
  white-space: pre-wrap; overflow-wrap: anywhere; width: 50%; }
table.side-by-side tr.changed td.old, table.side-by-side tr.removed td.old { background: #ffe4e4; }
table.side-by-side tr.changed td.new, table.side-by-side tr.added td.new { background: #dcf7e3; }
table.side-by-side tr.hunk td { color: #6b7280; } table.side-by-side tr.note td { color: #6b7280; }
svg.runs rect.run { fill: #9ca3af; } svg.runs rect.completed { fill: #22c55e; }
svg.runs rect.failed { fill: #ef4444; } svg.runs rect.running { fill: #eab308; }
svg.runs rect.cancelled { fill: #a855f7; } svg.runs rect.waiting_for_human { fill: #3b82f6; }
svg.trace { background: #fff; display: block; }
svg.trace line.tick { stroke: #e3e6ec; } svg.trace g.bar { cursor: pointer; }
svg.trace rect.row { fill: transparent; }
svg.trace g.bar:hover rect.row, svg.trace g.bar.selected rect.row { fill: #e8efff; }
svg.trace g.bar.open rect.span { stroke: #1d2330; stroke-dasharray: 3 2; }
.kind-run rect.span { fill: #64748b; } .kind-round rect.span { fill: #cbd5e1; }
.kind-model rect.span { fill: #3b82f6; } .kind-tool rect.span { fill: #10b981; }
.kind-child rect.span { fill: #8b5cf6; } .kind-human rect.span { fill: #f59e0b; }
.kind-timer rect.span { fill: #0ea5e9; }
.legend .key { border-left: 12px solid #999; padding: 0 .6em 0 .3em; font-size: 12px; }
.legend .kind-run { border-color: #64748b; } .legend .kind-round { border-color: #cbd5e1; }
.legend .kind-model { border-color: #3b82f6; } .legend .kind-tool { border-color: #10b981; }
.legend .kind-child { border-color: #8b5cf6; } .legend .kind-human { border-color: #f59e0b; }
.legend .kind-timer { border-color: #0ea5e9; }
#trace { max-height: 62vh; overflow: auto; }
#trace-detail { background: #fff; border-top: 2px solid #3b82f6; padding: .3em .8em;
  margin-top: .6em; }
#trace-detail pre { margin: .2em 0 .4em 1em; white-space: pre-wrap; overflow-wrap: anywhere;
  font-size: 12px; }
#trace-detail summary { cursor: pointer; font-family: ui-monospace, monospace; font-size: 12px; }
"""

STATIC_VERSION = hashlib.sha256((CONSOLE_JS + CONSOLE_CSS).encode()).hexdigest()[:12]
"""Of the script and the style sheet: the pages ask for ``console.css?v=VERSION``, so a
browser may keep them for good (:data:`CACHE_FOREVER`) and a new console's files still
reach it. Kept, the style sheet no longer stands between each page and its first paint
(it blocks rendering, and refetching it cost a page 30 to 50 ms in headless chromium)."""

CACHE_FOREVER = "public, max-age=31536000, immutable"
