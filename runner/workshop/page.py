"""The host's page: one self-contained HTML document (inline CSS and JS, no external assets). It
opens one EventSource on `events` (beside it, under its token) and redraws the table from each
scoreboard pushed: every seat, its attendee's name, what its users felt (when its drill has a
load), and its drill page's address with the seat's token, to hand out; every value goes in as
textContent."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gameday workshop</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
  h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
  #conn { font-size: .85rem; color: #777; margin-bottom: 1rem; }
  table { border-collapse: collapse; min-width: 60rem; }
  th, td { text-align: left; padding: .35rem .7rem; border-bottom: 1px solid #ddd; }
  th { background: #f3f3f3; }
  td.state { font-weight: 600; }
  tr.recovered td.state, tr.done td.state { color: #17803d; }
  tr.handed_over td.state { color: #b45309; }
  tr.gave_up td.state, tr.timed_out td.state,
  tr.error td.state, tr.down td.state { color: #b91c1c; }
  tr.idle td.state { color: #777; }
  td.short { color: #b91c1c; }
</style>
</head>
<body>
<h1 id="title">gameday workshop</h1>
<div id="conn">connecting...</div>
<table>
  <thead><tr>
    <th>seat</th><th>attendee</th><th>lab</th><th>state</th><th>scenario</th><th>elapsed</th><th>hints</th>
    <th>shortcuts tried</th><th>acked</th><th>recovered at</th><th class="users">users failed</th>
    <th>page</th>
  </tr></thead>
  <tbody id="seats"></tbody>
</table>
<script>
"use strict";
function secs(v) {
  if (v === null || v === undefined) return "-";
  const s = Math.floor(v);
  return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function draw(board) {
  document.getElementById("title").textContent = "gameday workshop: lab " + board.lab;
  const body = document.getElementById("seats");
  const rows = [];
  // the users' column shows once a seat's drill has a load (its requests since the fault)
  const loaded = board.seats.some((r) => r.users_sent !== null && r.users_sent !== undefined);
  for (const r of board.seats) {
    const tr = document.createElement("tr");
    tr.className = r.state;
    tr.dataset.seat = String(r.seat);
    cell(tr, String(r.seat));
    cell(tr, r.attendee || "-", "attendee");
    cell(tr, r.lab);
    cell(tr, r.state, "state");
    cell(tr, r.scenario || "-");
    cell(tr, secs(r.elapsed_s));
    cell(tr, String(r.hints_used));
    cell(tr, r.shortcuts.length ? r.shortcuts.join(", ") : "-", r.shortcuts.length ? "short" : "");
    cell(tr, secs(r.acked_at_s));
    cell(tr, secs(r.recovered_at_s));
    const users = r.users_sent === null || r.users_sent === undefined
      ? "-" : r.users_failed + " of " + r.users_sent;
    cell(tr, users, "users");
    const td = cell(tr, "");
    // the seat's page, its token in the address: what the host hands the attendee
    const seat = /^http:\\/\\/[A-Za-z0-9.-]+:\\d+\\/responder\\/[A-Za-z0-9_-]+\\/$/;
    if (r.page_url && seat.test(r.page_url)) {
      const a = document.createElement("a");
      a.href = r.page_url;
      a.textContent = r.page_url;
      a.className = "seat-page";
      td.appendChild(a);
    }
    // the seat's drill page with the answers: the scoreboard is the facilitator's page
    const view = /^http:\\/\\/[A-Za-z0-9.-]+:\\d+\\/facilitator\\/[A-Za-z0-9_-]+\\/$/;
    if (r.facilitator_url && view.test(r.facilitator_url)) {
      const f = document.createElement("a");
      f.href = r.facilitator_url;
      f.textContent = "facilitator's view";
      f.className = "facilitator";
      td.appendChild(document.createTextNode(" "));
      td.appendChild(f);
    }
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  for (const e of document.querySelectorAll(".users")) e.hidden = !loaded;
  const at = new Date(board.at).toLocaleTimeString();
  document.getElementById("conn").textContent = "live (updated " + at + ")";
}
const source = new EventSource("events");
source.addEventListener("scoreboard", (ev) => draw(JSON.parse(ev.data)));
source.onerror = () => { document.getElementById("conn").textContent = "reconnecting..."; };
</script>
</body>
</html>
"""
