// The operator console. Live from GET /events, read with fetch() and a streaming body reader
// (EventSource cannot send the Authorization header the operator API requires). Only the
// apps' table (each Feishu app the bridge serves: its bot, its health and what is wrong, its
// long connection, its Feishu API up or down and its call budget's use) is read from
// GET /status, every FEISHU_POLL_MS: it is the apps', not a conversation's, and has no event
// of its own. A conversation, an agent process and a fault each show their app (a
// conversation of an app other than the first is keyed `<app>/<chat>`).
// A reconnect sends the last frame id read (Last-Event-ID): the bridge replays what was
// missed, or sends a fresh snapshot when it cannot (restarted, or too long ago).
// Every value shown comes from the bridge, the agent or an operator (display names) and is
// untrusted: it is put in the page with textContent only, never innerHTML.
"use strict";

const KEY = "feishu-bridge-ops-token";
const USER_STATES = new Set(["waiting_approval", "waiting_reply"]);
const MAX_FAULTS = 50;
const FEISHU_POLL_MS = 5000;
const conversations = new Map(); // key -> snapshot (with revision)
let processes = [];
let apps = []; // [name, its /status entry], the first app first
let faults = []; // oldest first
let epoch = null;
let lastId = null; // the id of the last frame read, for Last-Event-ID
let selected = null;
let stream = null; // AbortController of the current /events read

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function takeToken() {
  // `#token=…`: a fragment never reaches the server, so never an access log. It is moved to
  // sessionStorage and removed from the address bar.
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(KEY) || "";
}

function headers() {
  const token = sessionStorage.getItem(KEY) || "";
  const h = { "X-Bridge-Client-Id": "console" };
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

function utc(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19);
}

function setStatus(text, cls) {
  const status = $("status");
  status.textContent = text;
  status.className = cls || "";
}

// Who moves next: the bridge says (`next_move`); derived from the state if it does not.
function nextMove(snap) {
  if (snap.next_move) return snap.next_move;
  if (USER_STATES.has(snap.state)) return "user";
  if (snap.state === "idle" || snap.state === "closed") return "nobody";
  return "agent";
}

// When the current state began, in the bridge's clock (seconds since the epoch).
function stateSince(snap) {
  if (snap.state === "waiting_approval" && snap.pending_approval) return snap.pending_approval.asked_at;
  if (snap.state === "waiting_reply" && snap.pending_question) return snap.pending_question.asked_at;
  if (snap.state === "idle" && snap.last_terminal) return snap.last_terminal.ended_at;
  return snap.started_at;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

function elapsedCell(since, now) {
  const td = el("td", since ? duration(now - since) : "–", "elapsed");
  if (since) td.dataset.since = String(since);
  return td;
}

function tick() {
  const now = Date.now() / 1000;
  for (const td of document.querySelectorAll("td.elapsed[data-since]")) {
    td.textContent = duration(now - Number(td.dataset.since));
  }
}

// The app a conversation is of: its snapshot says; else its key's `<app>/` prefix, else the
// first app's (whose keys have no prefix).
function appOf(key, snap) {
  if (snap && snap.app) return snap.app;
  const slash = key ? key.indexOf("/") : -1;
  if (slash > 0 && apps.some(([name]) => name === key.slice(0, slash))) return key.slice(0, slash);
  return apps.length ? apps[0][0] : "";
}

function render() {
  const rows = $("rows");
  const now = Date.now() / 1000;
  rows.replaceChildren();
  for (const [key, snap] of [...conversations.entries()].sort()) {
    const tr = el("tr", null, "conversation" + (key === selected ? " selected" : ""));
    tr.dataset.conversation = key;
    const since = stateSince(snap);
    const move = nextMove(snap);
    const approval = snap.pending_approval;
    const activity = snap.last_activity;
    const who = el("td", null, "who");
    if (snap.display_name) who.append(el("span", snap.display_name, "name"));
    who.append(el("span", key, snap.display_name ? "muted key" : "key"));
    tr.dataset.app = appOf(key, snap);
    tr.append(
      el("td", tr.dataset.app, "app"),
      who,
      el("td", snap.state, "state"),
      elapsedCell(since, now),
      el("td", move, "next-move next-" + move),
      el("td", snap.queue_length ?? 0, "queue"),
      el("td", approval ? approval.title + (approval.count > 1 ? " (+" + (approval.count - 1) + ")" : "") : "", "approval"),
      el("td", activity ? activity.kind + ": " + (activity.title || "") : "", "activity"),
    );
    tr.addEventListener("click", () => showTurn(key));
    rows.append(tr);
  }
  $("empty").hidden = conversations.size > 0;
}

function renderProcesses() {
  const now = Date.now() / 1000;
  // The apps in their order (the first first), each app's processes as its runtime lists them.
  const order = (p) => { const i = apps.findIndex(([name]) => name === p.app); return i < 0 ? 0 : i; };
  const rows = processes.map((p, i) => [order(p), i, p]).sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  $("process-rows").replaceChildren(...rows.map(([, , p]) => {
    const tr = el("tr", null, "process");
    const up = p.alive && p.started_at ? utc(p.started_at) + " (" + duration(now - p.started_at) + ")" : "–";
    tr.append(
      el("td", p.app || (apps.length ? apps[0][0] : ""), "app"), el("td", p.agent), el("td", p.workspace), el("td", p.slot), el("td", p.pid ?? "–", "pid"),
      el("td", p.state, "health proc-" + p.state), el("td", up, "up"), el("td", p.restarts ?? 0, "restarts"),
      el("td", p.sessions ?? 0), el("td", p.running_turns ?? 0),
    );
    return tr;
  }));
  $("no-process").hidden = processes.length > 0;
}

function renderFaults() {
  $("fault-rows").replaceChildren(...faults.slice().reverse().map((f) => {
    const tr = el("tr", null, "fault");
    const named = f.conversation && conversations.get(f.conversation);
    const who = f.conversation ? (named && named.display_name ? named.display_name + " · " : "") + f.conversation : "(process)";
    const app = f.app || (f.conversation ? appOf(f.conversation, named) : "");
    tr.append(el("td", utc(f.at)), el("td", app, "app"), el("td", who), el("td", f.kind, "kind"), el("td", f.detail || ""));
    return tr;
  }));
  $("no-fault").hidden = faults.length > 0;
}

function applySnapshot(data) {
  epoch = data.projection_epoch;
  conversations.clear();
  for (const [key, snap] of Object.entries(data.conversations || {})) conversations.set(key, snap);
  processes = data.processes || [];
  faults = (data.faults || []).slice(-MAX_FAULTS);
  render();
  renderProcesses();
  renderFaults();
}

function applyFrame(frame) {
  if (frame.projection_epoch !== epoch) return; // from another run: a fresh snapshot follows
  const known = conversations.get(frame.conversation);
  if (known && known.revision >= frame.revision) return; // stale or duplicate
  conversations.set(frame.conversation, { revision: frame.revision, ...frame.snapshot });
  render();
  if (frame.conversation === selected) showTurn(selected);
}

function onEvent(name, data, id) {
  if (name !== "snapshot" && data.projection_epoch !== epoch) return; // another run's
  if (id) lastId = id;
  if (name === "snapshot") applySnapshot(data);
  else if (name === "runtime_state") applyFrame(data);
  else if (name === "runtime_processes") { processes = data.processes || []; renderProcesses(); }
  else if (name === "fault") { faults = [...faults, data.fault].slice(-MAX_FAULTS); renderFaults(); }
  else if (name === "session_closed" || name === "session_died") {
    const snap = conversations.get(data.conversation);
    if (snap && snap.session_id === data.session_id) { snap.session_id = null; render(); }
  }
  // Fell too far behind: the bridge ended this stream; reading on from the last id read
  // replays what was missed.
  else if (name === "client_evicted") setStatus("behind, catching up", "");
  else if (name === "end") reconnect("bridge stopped, reconnecting");
}

// SSE framing: `event: <name>` and `data: <json>` lines, a blank line ends a frame.
async function readEvents(signal) {
  const h = headers();
  if (lastId) h["Last-Event-ID"] = lastId;
  const response = await fetch("/events", { headers: h, signal, cache: "no-store" });
  if (response.status === 401) {
    setStatus("wrong or missing token", "error");
    return false;
  }
  if (!response.ok) throw new Error("HTTP " + response.status);
  setStatus("live", "live");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return true;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      let id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("id:")) id = line.slice(3).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")), id);
    }
  }
}

function reconnect(why) {
  if (why) setStatus(why, "");
  if (stream) stream.abort();
  const controller = new AbortController();
  stream = controller;
  (async () => {
    let delay = 500;
    while (!controller.signal.aborted) {
      try {
        const again = await readEvents(controller.signal);
        if (!again) return;
        setStatus("disconnected, reconnecting", "error");
      } catch (err) {
        if (controller.signal.aborted) return;
        setStatus("disconnected, reconnecting", "error");
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 10000);
    }
  })();
}

async function showTurn(key) {
  selected = key;
  render();
  const snap = conversations.get(key);
  const turnId = snap && (snap.turn_id || (snap.last_terminal && snap.last_terminal.turn_id));
  const section = $("turn");
  section.hidden = false;
  $("turn-id").textContent = turnId || "(no turn yet)";
  $("turn-outcome").textContent = "";
  const timeline = $("timeline");
  if (!turnId) { timeline.replaceChildren(); return; }
  // In a group with two bots one message is a turn of each: ask for this conversation's app's.
  const app = appOf(key, snap);
  const query = app ? "?app=" + encodeURIComponent(app) : "";
  const response = await fetch("/turns/" + encodeURIComponent(turnId) + query, { headers: headers(), cache: "no-store" });
  if (selected !== key) return;
  if (!response.ok) {
    $("turn-outcome").textContent = response.status === 401 ? "wrong or missing token" : "HTTP " + response.status;
    timeline.replaceChildren();
    return;
  }
  const turn = await response.json();
  $("turn-outcome").textContent = turn.outcome ? "outcome: " + turn.outcome : "running";
  timeline.replaceChildren(...(turn.trace || []).map((entry) => {
    const tr = el("tr", null, "trace");
    tr.append(
      el("td", new Date(entry.at * 1000).toISOString().slice(11, 23)),
      el("td", (entry.at - turn.started_at).toFixed(3)),
      el("td", entry.kind, "kind"),
      el("td", typeof entry.detail === "string" ? entry.detail : JSON.stringify(entry.detail ?? "")),
    );
    return tr;
  }));
}

$("auth").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("token").value;
  if (value) sessionStorage.setItem(KEY, value);
  $("token").value = "";
  reconnect("connecting");
});

takeToken();
reconnect("connecting");
setInterval(() => { tick(); renderProcesses(); }, 1000); // ages count up (no request)

// Each app: its bot, its health (what is wrong, as /status words it), its long connection,
// its Feishu API as its posts find it and its call budget's use (GET /status `apps`).
function feishuText(app) {
  const api = app.feishu_api || {};
  let text = api.down
    ? "Feishu API: DOWN for " + Math.round(api.down_seconds) + " s (since " + utc(api.down_since) +
      "); " + api.probes + " probes; posts are owed and go out, in order, when it is back"
    : "Feishu API: up";
  const budget = app.feishu_budget;
  if (budget) {
    const waiting = Object.entries(budget.waiting || {})
      .map(([lane, count]) => lane + " " + count).join(", ");
    text += " · calls " + budget.calls_per_second + "/s, each API at most " + budget.rate +
      "/s now (limit " + budget.limit + "/s" +
      (budget.total_limit ? ", all together " + budget.total_limit + "/s" : "") +
      ") · sends " + budget.sends_per_second + "/s, " + Math.floor(budget.sends_ready) +
      " ready · waiting: " + waiting + " · 429s " + budget.rate_limited;
  }
  return text;
}

function renderApps() {
  $("app-rows").replaceChildren(...apps.map(([name, app]) => {
    const tr = el("tr", null, "app");
    tr.dataset.app = name;
    const bot = el("td", null, "bot");
    bot.append(el("span", app.bot_name || "–", "name"));
    if (app.bot_open_id) bot.append(el("span", app.bot_open_id, "muted"));
    const healthy = app.healthy !== false;
    const api = app.feishu_api || {};
    tr.append(
      el("td", name, "app"),
      bot,
      el("td", healthy ? "ok" : app.problem, "health " + (healthy ? "app-ok" : "app-problem")),
      el("td", app.long_connection || "webhook", "longconn"),
      el("td", app.conversations ?? 0, "count"),
      el("td", feishuText(app), "feishu" + (api.down ? " proc-exited" : "")),
    );
    return tr;
  }));
  $("no-app").hidden = apps.length > 0;
}

async function showApps() {
  try {
    const response = await fetch("/status", { headers: headers(), cache: "no-store" });
    if (!response.ok) return;
    const body = await response.json();
    apps = Object.entries(body.apps || {});
    renderApps();
    render(); // the conversations' apps, now that the apps are known
  } catch (error) {
    // Not reachable now: the next round tries again.
  }
}
setInterval(showApps, FEISHU_POLL_MS);
showApps();
