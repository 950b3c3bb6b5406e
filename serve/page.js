"use strict";
// The operator's page. Everything a target or a user wrote (URLs, ids,
// errors, tenant names) is set with textContent or as an attribute: never
// parsed as markup. The policy (serve.PageCSP) allows this file and
// page.css only: no inline script or style, requests to the API only.
//
// The token is typed in, or given once in the address's fragment,
// /v1/page#token=<token> (a fragment never reaches the server or its
// logs): the page keeps it in this tab's sessionStorage and takes it out
// of the address bar and of the history entry at once.
const $ = (id) => document.getElementById(id);
const KEY = "riverslot-token";
const STRIPS_AT_ONCE = 4; // GET /v1/schedules/{id} requests in flight
let next = null;
let generation = 0; // each show() drops the answers meant for the one before

const fragment = new URLSearchParams(location.hash.slice(1)).get("token");
if (fragment) {
  sessionStorage.setItem(KEY, fragment);
  history.replaceState(null, "", location.pathname + location.search);
}

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY) } });
  if (!r.ok) {
    let msg = await r.text();
    try { msg = JSON.parse(msg).error || msg; } catch (_) { /* not JSON: the text as it is */ }
    throw new Error(r.status + " " + msg);
  }
  return r.json();
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text != null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function cell(tr, text, cls) {
  const td = el("td", text == null ? "" : text, cls);
  tr.appendChild(td);
  return td;
}

const num = (x) => (x == null ? "" : String(Number(Number(x).toPrecision(3))));

// who shows whose token this is and, for a tenant's, its quota use.
function who(me) {
  const w = $("who"), q = $("quota");
  q.replaceChildren();
  q.hidden = !me.tenant;
  if (!me.tenant) {
    const scope = el("span", me.scope);
    scope.id = "scope";
    w.replaceChildren(el("strong", "Admin"), " token (scope ", scope, "): every tenant's schedules.");
    return;
  }
  const t = me.tenant;
  const name = el("strong", t.name);
  name.id = "tenant";
  const scope = el("span", me.scope);
  scope.id = "scope";
  w.replaceChildren("Tenant ", name, ", token scope ", scope, ".");
  const use = (label, used, max) => {
    const span = el("span", label + ": " + num(used) + (max > 0 ? " of " + num(max) + " " : " (no limit)"));
    if (max > 0) {
      const m = document.createElement("meter");
      m.max = max; m.value = used; m.high = 0.9 * max; m.title = Math.round((100 * used) / max) + "%";
      span.appendChild(m);
    }
    q.append(span, " ");
  };
  use("schedules", t.schedules, t.max_schedules);
  use("planned calls a second", t.planned_calls_per_second, t.max_calls_per_second);
}

function describe(c) {
  const parts = [c.started_at, c.ok ? "ok" : "failed"];
  if (c.status != null) parts.push("HTTP " + c.status);
  if (c.attempt > 1) parts.push("attempt " + c.attempt);
  if (c.lateness_seconds != null) parts.push("late " + c.lateness_seconds.toFixed(2) + " s");
  if (c.latency_seconds != null) parts.push("took " + c.latency_seconds.toFixed(2) + " s");
  if (c.error) parts.push(c.error);
  return parts.join(" · ");
}

// strip fills td with one cell per call; the API answers newest first,
// the strip shows the newest right.
function strip(td, calls) {
  td.replaceChildren();
  let failed = 0;
  for (const c of calls.slice().reverse()) {
    const s = el("span", null, "call " + (c.ok ? "ok" : "failed"));
    s.title = describe(c);
    if (!c.ok) failed++;
    td.appendChild(s);
  }
  td.setAttribute("aria-label", calls.length ? failed + " failed of the last " + calls.length + " calls" : "no calls yet");
  if (!calls.length) td.textContent = "none yet";
}

// strips reads each row's last calls, a few requests at a time.
async function strips(rows, gen) {
  const worker = async () => {
    for (let r = rows.shift(); r && gen === generation; r = rows.shift()) {
      try {
        const s = await api("/v1/schedules/" + encodeURIComponent(r.id));
        if (gen === generation) strip(r.td, s.last_calls || []);
      } catch (e) {
        if (gen === generation) { r.td.textContent = "?"; r.td.title = e.message; }
      }
    }
  };
  await Promise.all(Array.from({ length: STRIPS_AT_ONCE }, worker));
}

async function load(after, gen) {
  const page = await api("/v1/schedules?limit=100" + (after ? "&after=" + encodeURIComponent(after) : ""));
  if (gen !== generation) return;
  const body = $("schedules").tBodies[0];
  const rows = [];
  for (const s of page.schedules) {
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    const h = s.health || {};
    const c = h.last_call || {};
    const id = cell(tr, s.id);
    if (s.external_id) id.appendChild(el("span", s.external_id, "ext"));
    cell(tr, s.url, "url"); cell(tr, s.period); cell(tr, s.offset);
    cell(tr, h.status, h.status);
    rows.push({ id: s.id, td: cell(tr, "…", "strip") });
    cell(tr, c.started_at); cell(tr, c.status, "num");
    cell(tr, c.lateness_seconds == null ? "" : c.lateness_seconds.toFixed(2), "num");
    cell(tr, h.recent_failures, "num");
    body.appendChild(tr);
  }
  next = page.next;
  $("more").hidden = !next;
  $("schedules").hidden = false;
  await strips(rows, gen);
}

async function show() {
  const gen = ++generation;
  $("schedules").tBodies[0].replaceChildren();
  $("more").hidden = true;
  try {
    const me = await api("/v1/me");
    if (gen !== generation) return;
    who(me);
    const stats = await api("/v1/stats?granularity=minute");
    if (gen !== generation) return;
    let calls = 0, failures = 0;
    for (const p of stats.points) { calls += p.calls; failures += p.failures; }
    $("summary").textContent = "Last hour: " + calls + " calls, " + failures + " failed.";
    await load(null, gen);
  } catch (e) {
    if (gen === generation) $("summary").textContent = "Error: " + e.message;
  }
}

$("auth").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("token").value);
  $("token").value = "";
  show();
});
$("more").addEventListener("click", () => load(next, generation).catch((e) => { $("summary").textContent = "Error: " + e.message; }));
if (sessionStorage.getItem(KEY)) show();
