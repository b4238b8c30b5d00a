// The emulator's chat page: plain DOM, no framework, no network beyond this origin.
// Live updates come from a long-poll on /_emulator/timeline?since=<revision>.
"use strict";

const state = {
  chats: {}, names: {}, chatType: "p2p", revision: -1, seenCallbacks: null, abort: null,
  outage: null, outageTick: null,
  // Every bot (the first is the default), each one's private chat with the user, the
  // group's bots, and whose private chat is shown.
  bots: [], p2pChats: {}, groupBots: [], appId: null,
};
// The switch's "drill": the outage a bridge must ride out, then the API is up again.
const DRILL = [{ mode: "503", seconds: 20 }, { mode: "429", seconds: 20 }, { mode: "timeout", seconds: 20 }];
const $ = (sel) => document.querySelector(sel);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function setStatus(text, isError) {
  const status = $("#status");
  status.textContent = text;
  status.classList.toggle("error", !!isError);
}

function showToast(toast) {
  const node = el("div", "toast " + (toast.type || "info"), toast.content || "");
  $("#toasts").appendChild(node);
  setTimeout(() => node.remove(), 4000);
}

// Minimal lark_md: ```code blocks```, **bold**, <at id=…></at> mentions and line breaks;
// everything else is shown as text (never as HTML).
function markdown(text) {
  const box = el("div", "card-text");
  String(text || "").split(/```[^\n]*\n?([\s\S]*?)\n?```/).forEach((part, index) => {
    if (index % 2 === 1) box.appendChild(el("pre", "card-code", part));
    else inline(part.replace(/^\n+|\n+$/g, ""), box);
  });
  return box;
}

// Plain text messages have mentions but no markdown: `bold` is for lark_md only.
function inline(text, into, bold = true) {
  text.split(/(\*\*[^*]+\*\*|<at [^>]*>[^<]*<\/at>)/).forEach((part) => {
    if (bold && part.startsWith("**") && part.endsWith("**") && part.length > 4) {
      into.appendChild(el("b", null, part.slice(2, -2)));
    } else if (part.startsWith("<at ")) {
      into.appendChild(el("span", "mention", "@" + mentionName(part)));
    } else if (part) {
      into.appendChild(document.createTextNode(part));
    }
  });
}

// <at id=ou_x></at> (cards) or <at user_id="ou_x">Name</at> (text): the name Feishu would show.
function mentionName(tag) {
  const inner = tag.replace(/^<at [^>]*>|<\/at>$/g, "");
  if (inner) return inner;
  const id = (tag.match(/(?:user_)?id\s*=\s*"?([^"\s>]+)/) || [])[1] || "";
  if (id === "all") return "所有人";
  return state.names[id] || id || "?";
}

function textOf(obj) {
  if (!obj) return "";
  if (typeof obj === "string") return obj;
  return obj.content || "";
}

function buttonValue(button) {
  if (button.value && typeof button.value === "object") return button.value;
  const behavior = (button.behaviors || []).find((b) => b.type === "callback");
  return behavior ? behavior.value || {} : null;
}

function renderButton(button, messageId) {
  const node = el("button", button.type || "default", textOf(button.text) || "button");
  const value = buttonValue(button);
  if (button.disabled || value === null) node.disabled = true;
  node.addEventListener("click", async () => {
    node.disabled = true;
    try {
      const response = await fetch("/_emulator/click", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ message_id: messageId, value: value }),
      });
      if (!response.ok) showToast({ type: "error", content: await response.text() });
    } finally {
      node.disabled = false;
    }
  });
  return node;
}

function renderElements(elements, messageId, into) {
  (elements || []).forEach((item) => {
    const tag = item.tag;
    if (tag === "markdown" || tag === "lark_md") {
      into.appendChild(markdown(item.content));
    } else if (tag === "div") {
      if (item.text) into.appendChild(markdown(textOf(item.text)));
      (item.fields || []).forEach((f) => into.appendChild(markdown(textOf(f.text))));
    } else if (tag === "plain_text") {
      into.appendChild(el("div", "card-text", item.content));
    } else if (tag === "hr") {
      into.appendChild(el("hr"));
    } else if (tag === "note") {
      const note = el("div", "card-note");
      (item.elements || []).forEach((n) => note.appendChild(el("span", null, textOf(n) + " ")));
      into.appendChild(note);
    } else if (tag === "action") {
      const row = el("div", "card-actions");
      (item.actions || []).forEach((b) => row.appendChild(renderButton(b, messageId)));
      into.appendChild(row);
    } else if (tag === "button") {
      const row = el("div", "card-actions");
      row.appendChild(renderButton(item, messageId));
      into.appendChild(row);
    } else if (tag === "column_set") {
      const row = el("div", "card-actions");
      (item.columns || []).forEach((c) => renderElements(c.elements, messageId, row));
      into.appendChild(row);
    } else if (item.elements) {
      renderElements(item.elements, messageId, into); // form, collapsible_panel, containers
    } else if (tag === "img") {
      into.appendChild(el("div", "card-note", "[image]"));
    }
  });
}

function renderCard(card, messageId) {
  const box = el("div", "card");
  const header = card.header || {};
  const title = header.title ? textOf(header.title) : "";
  if (title) box.appendChild(el("div", "card-header " + (header.template || "blue"), title));
  const body = el("div", "card-body");
  const elements = (card.body && card.body.elements) || card.elements ||
    (card.i18n_elements && (card.i18n_elements.zh_cn || Object.values(card.i18n_elements)[0]));
  renderElements(elements, messageId, body);
  box.appendChild(body);
  return box;
}

function quoteOf(parentId, byId) {
  const parent = byId.get(parentId);
  if (!parent) return "回复 " + parentId.slice(0, 12) + "…";
  let text = parent.text;
  if (text === null || text === undefined) {
    const header = parent.card && parent.card.header && parent.card.header.title;
    text = "[卡片] " + textOf(header);
  }
  text = String(text).replace(/\s+/g, " ").trim();
  if (text.length > 40) text = text.slice(0, 40) + "…";
  return "回复 " + parent.sender_name + "：" + text;
}

function renderMessage(message, byId) {
  const side = message.sender_type === "app" ? "bot" : "user";
  const node = el("div", "msg " + side);
  node.dataset.messageId = message.message_id;
  let sender = "sender";
  if (message.app_id) {
    node.dataset.appId = message.app_id;
    sender += " bot-" + (state.bots.findIndex((b) => b.app_id === message.app_id) + 1);
  }
  node.appendChild(el("div", sender, message.sender_name));
  if (message.parent_id) node.appendChild(el("div", "quote", quoteOf(message.parent_id, byId)));
  if (message.card) {
    node.appendChild(renderCard(message.card, message.message_id));
    if (message.updated) node.appendChild(el("div", "updated", "已更新"));
  } else if (message.recalled) {
    node.appendChild(el("div", "bubble recalled", "此消息已撤回"));
  } else {
    const bubble = el("div", "bubble");
    inline(message.text || "", bubble, false);
    node.appendChild(bubble);
  }
  if (side === "user" && !message.recalled) {
    const recall = el("button", "recall", "撤回");
    recall.type = "button";
    recall.addEventListener("click", () => post("/_emulator/recall", { message_id: message.message_id }));
    node.appendChild(recall);
  }
  if (message.reactions.length || message.urgent) {
    const row = el("div", "reactions");
    message.reactions.forEach((r) => row.appendChild(el("span", "reaction", r)));
    if (message.urgent) row.appendChild(el("span", "reaction urgent", "加急"));
    node.appendChild(row);
  }
  return node;
}

function render(data) {
  const timeline = $("#timeline");
  const atBottom = timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 40;
  const byId = new Map(data.messages.map((m) => [m.message_id, m]));
  timeline.replaceChildren(...data.messages.map((m) => renderMessage(m, byId)));
  if (atBottom) timeline.scrollTop = timeline.scrollHeight;
  // Toasts of callbacks that happened after the page loaded (by the page or by a test).
  const firstLoad = state.seenCallbacks === null;
  if (firstLoad) state.seenCallbacks = new Set();
  data.callbacks.forEach((c) => {
    if (state.seenCallbacks.has(c.seq)) return;
    state.seenCallbacks.add(c.seq);
    if (!firstLoad && c.toast) showToast(c.toast);
  });
  const failed = data.failed_deliveries ? ` · ${data.failed_deliveries} failed pushes` : "";
  setStatus(`live · rev ${data.revision}${failed}`, false);
  if (data.outage) renderOutage(data.outage);
}

// The message API's state (from /_emulator/outage, also in every timeline answer). While a
// schedule runs, a local countdown ticks and the state is read again when the step ends.
function renderOutage(outage) {
  state.outage = { ...outage, until: Date.now() + (outage.remaining_seconds || 0) * 1000 };
  const select = $("#api-mode");
  if (document.activeElement !== select) select.value = outage.mode;
  clearInterval(state.outageTick);
  showOutage();
  if (outage.remaining_seconds !== null) state.outageTick = setInterval(showOutage, 1000);
}

function showOutage() {
  const outage = state.outage;
  const down = outage.mode !== "up";
  let text = down ? `API ${outage.mode} · 已拒绝 ${outage.refused} 次` : "API up";
  if (outage.remaining_seconds !== null) {
    const left = Math.max(0, Math.ceil((outage.until - Date.now()) / 1000));
    text += ` · ${left} 秒后 → ${outage.next.length ? outage.next[0].mode : "up"}`;
    if (left === 0) { clearInterval(state.outageTick); refreshOutage(); }
  }
  const node = $("#api-state");
  node.textContent = text;
  node.classList.toggle("down", down);
}

async function refreshOutage() {
  const response = await fetch("/_emulator/outage");
  if (response.ok) renderOutage(await response.json());
}

async function setOutage(value) {
  const body = value === "drill" ? { schedule: DRILL } : { mode: value };
  const response = await fetch($("#api-mode").dataset.endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    showToast({ type: "error", content: await response.text() });
    return;
  }
  $("#api-mode").blur();
  renderOutage(await response.json());
}

// The chat shown: the group, or the private chat with the chosen bot.
function chatId() {
  return state.chatType === "group" ? state.chats.group : state.p2pChats[state.appId];
}

async function poll() {
  for (;;) {
    state.abort = new AbortController();
    const shown = chatId();
    try {
      const url = `/_emulator/timeline?chat_id=${encodeURIComponent(shown)}&since=${state.revision}`;
      const response = await fetch(url, { signal: state.abort.signal });
      const data = await response.json();
      if (data.chat_id !== chatId()) continue;
      state.revision = data.revision;
      render(data);
    } catch (err) {
      if (err.name === "AbortError") continue;
      setStatus("disconnected — retrying", true);
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

function switchChat(chatType) {
  state.chatType = chatType;
  state.revision = -1;
  state.seenCallbacks = null;
  const group = chatType === "group";
  $("#mention-picker").style.visibility = group ? "visible" : "hidden";
  $("#members").hidden = !group;
  $("#p2p-bot").hidden = group || state.bots.length < 2;
  $("#bot-menu").hidden = group; // Feishu shows the bot menu in the private chat only
  if (state.abort) state.abort.abort();
}

// Whom the composer addresses: in a group the bots ticked in the @-picker, in a private
// chat its bot.
function addressed() {
  if (state.chatType !== "group") return { chat_type: "p2p", app_id: state.appId };
  const ticked = [...document.querySelectorAll("#mention-picker input:checked")];
  return { chat_type: "group", mention_apps: ticked.map((box) => box.dataset.appId) };
}

async function send() {
  const composer = $("#composer");
  const text = composer.value.trim();
  if (!text) return;
  composer.value = "";
  await deliver("/_emulator/send", { text: text, ...addressed() });
}

// An event pushed to the bridge; says so when the push did not go through.
async function deliver(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    showToast({ type: "error", content: await response.text() });
    return;
  }
  const result = await response.json();
  if (!result.delivered) {
    const why = result.delivery ? `${result.delivery.outcome} ${result.delivery.status || ""}` : "no webhook_url";
    const bot = result.delivery && state.bots.length > 1 ? botName(result.delivery.app_id) + " " : "";
    showToast({ type: "warning", content: "推送未成功: " + bot + why });
  }
}

async function post(url, body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) showToast({ type: "error", content: await response.text() });
}

async function attach(input) {
  const file = input.files[0];
  if (!file) return;
  const form = new FormData();
  form.append("file", file, file.name);
  const to = addressed();
  form.append("chat_type", to.chat_type);
  if (to.app_id) form.append("app_id", to.app_id);
  if (to.mention_apps) form.append("mention_apps", JSON.stringify(to.mention_apps));
  input.value = "";
  const response = await fetch("/_emulator/attach", { method: "POST", body: form });
  if (!response.ok) showToast({ type: "error", content: await response.text() });
}

async function voice() {
  // A generated spoken clip (no microphone needed); what recognition hears in it is the
  // composer's text, or the clip's own words when the composer is empty.
  const transcript = $("#composer").value.trim();
  $("#composer").value = "";
  await post("/_emulator/voice", { transcript, ...addressed() });
}

async function menuClick(eventKey) {
  await deliver("/_emulator/menu", { event_key: eventKey, app_id: state.appId });
}

function botName(appId) {
  const bot = state.bots.find((b) => b.app_id === appId);
  return bot ? bot.name : appId;
}

// The bots: the private-chat chooser, the group's members and its @-picker (the first bot
// ticked, as a user @s the bot they mean).
function setUpBots(info) {
  state.bots = info.bots;
  state.p2pChats = info.p2p_chats;
  state.groupBots = info.group_bots;
  state.appId = info.bot.app_id;
  const chooser = $("#p2p-bot");
  state.bots.forEach((bot) => chooser.appendChild(new Option(bot.name, bot.app_id)));
  chooser.addEventListener("change", () => { state.appId = chooser.value; switchChat("p2p"); });
  const members = $("#members");
  members.appendChild(el("span", null, "群成员"));
  members.appendChild(el("span", "member", info.user.name));
  state.groupBots.forEach((appId, index) => {
    const member = el("span", "member bot", botName(appId) + "（机器人）"); // as Feishu tags a bot
    member.dataset.appId = appId;
    members.appendChild(member);
    const label = el("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.dataset.appId = appId;
    if (index === 0) { box.id = "mention-bot"; box.checked = true; }
    label.append(box, " @" + botName(appId));
    $("#mention-picker").appendChild(label);
  });
}

async function main() {
  const info = await (await fetch("/_emulator/state")).json();
  state.chats = info.chats;
  state.names = info.names;
  setUpBots(info);
  const title = state.bots.map((b) => b.name).join(" · ");
  $("#bot-name").textContent = title;
  document.title = title + " · Feishu emulator";
  info.scenarios.forEach((text) => {
    const chip = el("button", "scenario", text.replace(/\n/g, " ↵ "));
    chip.type = "button";
    chip.title = text;
    chip.addEventListener("click", () => { $("#composer").value = text; $("#composer").focus(); });
    $("#scenarios").appendChild(chip);
  });
  document.querySelectorAll("input[name=chat-type]").forEach((radio) =>
    radio.addEventListener("change", () => switchChat(radio.value)));
  $("#composer-form").addEventListener("submit", (event) => { event.preventDefault(); send(); });
  $("#attach").addEventListener("change", (event) => attach(event.target));
  $("#voice").addEventListener("click", () => voice());
  document.querySelectorAll("#bot-menu button").forEach((button) =>
    button.addEventListener("click", () => menuClick(button.dataset.eventKey)));
  $("#api-mode").addEventListener("change", (event) => setOutage(event.target.value));
  $("#composer").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); send(); }
  });
  switchChat("p2p");
  poll();
}

main();
