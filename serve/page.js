"use strict";
// Everything a target or a user wrote is set with textContent: never parsed as markup.
const $ = (id) => document.getElementById(id);
let next = null;
async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + sessionStorage.getItem("riverslot-token") } });
  if (!r.ok) throw new Error(r.status + " " + (await r.text()));
  return r.json();
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
}
async function load(after) {
  const page = await api("/v1/schedules?limit=100" + (after ? "&after=" + encodeURIComponent(after) : ""));
  const body = $("schedules").tBodies[0];
  for (const s of page.schedules) {
    const tr = document.createElement("tr");
    const h = s.health || {};
    const c = h.last_call || {};
    cell(tr, s.id); cell(tr, s.url); cell(tr, s.period); cell(tr, s.offset);
    cell(tr, h.status, h.status); cell(tr, c.started_at); cell(tr, c.status, "num");
    cell(tr, c.lateness_seconds == null ? "" : c.lateness_seconds.toFixed(2), "num");
    cell(tr, h.recent_failures, "num");
    body.appendChild(tr);
  }
  next = page.next;
  $("more").hidden = !next;
  $("schedules").hidden = false;
}
async function show() {
  $("schedules").tBodies[0].replaceChildren();
  try {
    const stats = await api("/v1/stats?granularity=minute");
    let calls = 0, failures = 0;
    for (const p of stats.points) { calls += p.calls; failures += p.failures; }
    $("summary").textContent = "Last hour: " + calls + " calls, " + failures + " failed.";
    await load(null);
  } catch (e) {
    $("summary").textContent = "Error: " + e.message;
  }
}
$("auth").addEventListener("submit", (e) => { e.preventDefault(); sessionStorage.setItem("riverslot-token", $("token").value); show(); });
$("more").addEventListener("click", () => load(next));
if (sessionStorage.getItem("riverslot-token")) show();
