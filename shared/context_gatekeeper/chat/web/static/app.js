// gatekeeper-chat in the browser. No framework, no build step: every text is set with
// textContent (never parsed as HTML), so a message is always shown as text and never runs,
// and through shown(), so a control character or bidi override is drawn, never obeyed.
"use strict";

(function () {
  const TOKEN = document.querySelector('meta[name="gatekeeper-token"]').content;
  const $ = (id) => document.getElementById(id);
  const state = {
    session: new URLSearchParams(location.search).get("session") || "default",
    view: null,
    editing: sessionStorage.getItem("gatekeeper-editing") === "1",
    busy: false,
    deleting: null, // the session the open "Delete…" bar names (Delete erases that one, never another)
  };

  // -- DOM helpers -----------------------------------------------------------------
  // Text the page did not write (an answer, a stored message, a session name, an error naming
  // them) may hold control characters, or bidi overrides that reorder what is shown: each is drawn
  // as one visible character, by the terminal chat's table (the server puts it in the <meta>).
  const VISIBLE = new Map(JSON.parse(document.querySelector('meta[name="gatekeeper-visible"]').content)
    .map(([code, standIn]) => [String.fromCharCode(code), String.fromCharCode(standIn)]));
  const ACTED_ON = new RegExp("[" + [...VISIBLE.keys()]
    .map((c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")).join("") + "]", "g");
  const shown = (text) => String(text).replace(ACTED_ON, (c) => VISIBLE.get(c));
  function setText(node, text) {
    node.textContent = shown(text);
  }

  // Every text and title set here is shown(); attributes that name things (data-*) keep the exact text.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") setText(node, value);
      else if (key === "title") node.setAttribute(key, shown(value));
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key.startsWith("data-") || key.startsWith("aria-") || key === "type" || key === "id")
        node.setAttribute(key, value === true ? "" : String(value));
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(shown(child)) : child);
    }
    return node;
  }

  function showError(message) {
    setText($("error-text"), message);
    $("error").hidden = false;
  }
  function clearError() {
    $("error").hidden = true;
    $("error-text").textContent = "";
  }

  // -- requests --------------------------------------------------------------------
  async function call(path, body) {
    // every API request carries the page's token: the server answers no other page, not even to read
    const options = body === undefined ? {headers: {"x-gatekeeper-token": TOKEN}} : {
      method: "POST",
      headers: {"content-type": "application/json", "x-gatekeeper-token": TOKEN},
      body: JSON.stringify(body),
    };
    let response;
    try {
      response = await fetch(path, options);
    } catch (err) {
      throw new Error("the server cannot be reached (is gatekeeper-chat --web still running?)");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = {error: "the server answered " + response.status + " without a usable body"};
    }
    if (!response.ok) {
      if (data && data.view) render(data.view); // another tab moved on: show where things are now
      const error = new Error((data && data.error) || "request failed (" + response.status + ")");
      error.status = response.status;
      throw error;
    }
    return data;
  }

  // quiet: a refresh the user did not ask for (coming back to the tab) leaves the error shown
  async function act(work, quiet = false) {
    if (state.busy) return;
    state.busy = true;
    document.body.classList.add("busy");
    $("send").disabled = true;  // a send while busy would be ignored: say so instead of dropping it
    if (!quiet) clearError();
    try {
      await work();
    } catch (err) {
      showError(err.message || String(err));
    } finally {
      state.busy = false;
      document.body.classList.remove("busy");
      $("send").disabled = false;
    }
  }

  const session = () => state.session;
  const head = () => (state.view ? state.view.head : null);

  async function load(name) {
    const view = await call("/api/view?session=" + encodeURIComponent(name));
    render(view);
  }

  // -- rendering -------------------------------------------------------------------
  function render(view) {
    state.view = view;
    state.session = view.session;
    const url = new URL(location.href);
    if (url.searchParams.get("session") !== view.session) {
      url.searchParams.set("session", view.session);
      history.replaceState(null, "", url);
    }
    document.title = shown(view.session + " · gatekeeper-chat");
    setText($("session-name"), "session: " + view.session + " · revision " + view.head);
    if (state.deleting !== view.session) closeDeleteBar(); // it named another session
    renderSessions(view);
    renderMessages(view);
    renderPreview(view.preview);
    renderHistory(view);
    renderMode();
    if (view.notice) showError(view.notice);
  }

  function renderSessions(view) {
    const list = $("session-list");
    list.replaceChildren(...view.sessions.map((name) => el("li", {},
      el("button", {
        type: "button", class: "session", "data-session": name,
        "aria-current": name === view.session ? "true" : null,
        text: name,
        onclick: () => { if (name !== state.session) act(() => load(name)); },
      }))));
  }

  function renderMessages(view) {
    const box = $("messages");
    const nodes = [];
    if (!view.messages.length) {
      nodes.push(el("p", {class: "empty", text: "No messages yet. Ask something; then ask about something else, " +
        "and see under each answer which earlier turns the gate sent."}));
    }
    for (const m of view.messages) nodes.push(messageNode(m));
    box.replaceChildren(...nodes);
    box.scrollTop = box.scrollHeight;
  }

  function messageNode(m) {
    const who = {user: "you", assistant: "assistant", system: "system", tool: "tool"}[m.role] || m.role;
    const header = el("div", {class: "meta"},
      m.turn !== null ? el("span", {class: "turn-no", text: "turn " + m.turn}) : null,
      el("span", {class: "who", text: who}),
      m.origin !== "original" ? el("span", {class: "origin", text: m.origin}) : null);
    // the pin goes on the turn's first message, whatever its role (a turn may open with an
    // assistant message; a user message inside an agent's tool-call turn does not start one)
    const first = m.turn !== null && m.id === m.turn_key;
    if (first) {
      header.append(el("button", {
        type: "button", class: "pin" + (m.pinned ? " on" : ""), "data-testid": "pin", "data-turn": m.turn,
        "aria-pressed": m.pinned ? "true" : "false",
        title: m.pinned ? "Pinned: always sent to the model. Click to unpin." : "Pin: always send this turn to the model",
        text: m.pinned ? "📌 pinned" : "pin",
        // key: the id of the turn's first message, which names the turn shown even when the server
        // restarted and numbers the turns anew; the number is only a fallback for older servers
        onclick: () => act(async () => render(await call("/api/pin", {session: session(), key: m.turn_key, turn: m.turn, pinned: !m.pinned}))),
      }));
    }
    const node = el("article", {
      class: "message " + m.role, "data-testid": "message", "data-role": m.role,
      "data-turn": m.turn === null ? "" : m.turn, "data-id": m.id, "data-turn-key": m.turn_key,
      id: first ? "turn-" + m.turn : null, // one per turn: where a strip's turn number jumps to
    }, header, el("div", {class: "content", text: m.content}));
    if (m.role === "assistant" && m.context) node.append(stripNode(m.context));
    return node;
  }

  function stripNode(ctx) {
    const sent = ctx.earlier.filter((t) => t.kept);
    const gate = ctx.decision;
    const first = ctx.earlier.length === 0;
    const summary = el("div", {class: "strip-summary"},
      el("span", {class: "decision " + ctx.decision, title: "the topic gate's decision for this question", text: "gate: " + gate}),
      first ? null : el("span", {text: "sent " + sent.length + " of " + ctx.earlier.length + " earlier turn" + (ctx.earlier.length === 1 ? "" : "s")}),
      first ? null : el("span", {class: "saved", text: ctx.tokens_saved + " tokens saved (" + ctx.tokens_kept + " of " + ctx.tokens_total + " sent)"}),
      ctx.over_budget ? el("span", {class: "warn", text: "pinned turns exceed the budget"}) : null);
    const chips = ctx.earlier.map((t) => {
      const label = (t.turn === null ? "deleted turn" : "#" + t.turn) + " " + (t.kept ? "sent" : "left out") + ": " +
        (t.why ? t.reason + " — " + t.why : t.reason);
      const title = t.kept ? "Sent to the model" : "Left out of this call";
      if (t.turn === null) return el("span", {class: "chip " + (t.kept ? "kept" : "dropped") + " gone", title, text: label});
      return el("button", {
        type: "button", class: "chip " + (t.kept ? "kept" : "dropped"), "data-turn": t.turn, "data-kept": t.kept ? "true" : "false",
        title: title + " (click to see the turn)", text: label,
        onclick: () => scrollToTurn(t.turn),
      });
    });
    return el("div", {class: "strip", "data-testid": "context-strip"}, summary,
      chips.length ? el("div", {class: "chips"}, ...chips) : el("div", {class: "chips none", text: "no earlier turns"}));
  }

  function scrollToTurn(turn) {
    const target = document.getElementById("turn-" + turn);
    if (!target) return;
    target.scrollIntoView({block: "center"});
    target.classList.remove("flash");
    void target.offsetWidth; // restart the highlight
    target.classList.add("flash");
  }

  function segments(parts, cls) {
    return parts.map(([op, text]) => op === "same" ? document.createTextNode(shown(text))
      : el(op === "del" ? "del" : "ins", {class: cls, text}));
  }

  function renderPreview(preview) {
    const box = $("preview");
    if (!preview) {
      box.hidden = true;
      $("preview-rows").replaceChildren();
      return;
    }
    box.hidden = false;
    setText($("preview-title"), "Preview of: " + preview.instruction);
    const share = Math.round(preview.deleted_share * 100);
    $("preview-note").textContent = preview.needs_confirmation
      ? "This edit deletes or replaces " + share + "% of the conversation: Commit applies it anyway, Discard drops it."
      : preview.rows.length + " message" + (preview.rows.length === 1 ? "" : "s") + " would change. Nothing is changed until you commit.";
    $("preview-note").classList.toggle("warn", preview.needs_confirmation);
    $("commit").textContent = preview.needs_confirmation ? "Commit anyway" : "Commit";
    $("preview-rows").replaceChildren(...preview.rows.map((row) => el("div", {class: "diff-row " + row.status, "data-status": row.status},
      el("div", {class: "side before"}, el("div", {class: "meta", text: row.role + (row.status === "added" ? " (new)" : "") + " · before"}),
        el("div", {class: "content"}, ...(row.before ? segments(row.before, "removed") : [el("em", {text: "(not there)"})]))),
      el("div", {class: "side after"}, el("div", {class: "meta", text: row.role + " · after"}),
        el("div", {class: "content"}, ...(row.after ? segments(row.after, "added") : [el("em", {text: "(deleted)"})]))))));
  }

  function renderHistory(view) {
    $("undo").disabled = !view.can_undo;
    $("redo").disabled = !view.can_redo;
    const items = view.history.slice().reverse().map((r) => el("li", {
      class: "history-item " + r.kind + (r.number === view.head ? " current" : ""),
      "data-testid": "history-item", "data-kind": r.kind, "data-number": r.number,
    },
    el("div", {class: "meta"},
      el("span", {class: "rev", text: "r" + r.number}),
      el("span", {class: "kind", text: r.kind}),
      el("time", {text: new Date(r.time * 1000).toLocaleTimeString()})),
    el("div", {class: "label", text: r.label}),
    r.number === view.head ? el("span", {class: "here", text: "current"}) : el("button", {
      type: "button", class: "revert", "data-testid": "revert", "data-number": r.number,
      title: "Make the conversation what it was after revision " + r.number + " (a new revision; undo takes it back)",
      text: "Revert to r" + r.number,
      onclick: () => act(async () => render(await call("/api/revert", {session: session(), revision: r.number, head: head()}))),
    })));
    $("history-list").replaceChildren(...items);
  }

  function renderMode() {
    document.body.classList.toggle("editing", state.editing);
    $("mode-toggle").textContent = state.editing ? "Edit mode" : "Chat mode";
    $("mode-toggle").setAttribute("aria-pressed", state.editing ? "true" : "false");
    $("mode-label").textContent = state.editing ? "Edit history" : "Chat";
    $("message-input").placeholder = state.editing
      ? "How should the history change? e.g. it was Iceland, not Ireland"
      : "Type a message (Enter sends, Shift+Enter: new line; /edit … rewrites the history)";
    $("send").textContent = state.editing ? "Preview" : "Send";
  }

  function setMode(editing) {
    state.editing = editing;
    sessionStorage.setItem("gatekeeper-editing", editing ? "1" : "0");
    renderMode();
  }

  // -- actions ---------------------------------------------------------------------
  async function sendChat(text) {
    const box = $("messages");
    let response;
    try {
      response = await fetch("/api/chat", {
        method: "POST",
        headers: {"content-type": "application/json", "x-gatekeeper-token": TOKEN},
        body: JSON.stringify({session: session(), text}),
      });
    } catch (err) {
      throw new Error("the server cannot be reached (is gatekeeper-chat --web still running?); " +
        "your message was not added to the conversation, send it again");
    }
    if (!response.ok) {
      let data = {};
      try { data = await response.json(); } catch (err) { /* no body */ }
      throw new Error(data.error || "the message could not be sent (" + response.status + ")");
    }
    box.querySelector(".empty")?.remove();
    const user = el("article", {class: "message user pending", "data-testid": "message", "data-role": "user", "data-turn": ""},
      el("div", {class: "meta"}, el("span", {class: "who", text: "you"})), el("div", {class: "content", text}));
    const answerText = el("div", {class: "content streaming"});
    const answer = el("article", {class: "message assistant pending", "data-testid": "message", "data-role": "assistant", "data-turn": ""},
      el("div", {class: "meta"}, el("span", {class: "who", text: "assistant"})), answerText);
    box.append(user, answer);
    box.scrollTop = box.scrollHeight;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let finished = false;
    const handle = (event) => {
      if (event.type === "start") {
        if (event.context) answer.append(stripNode(event.context));
      } else if (event.type === "chunk") {
        answerText.textContent += shown(event.text);
        box.scrollTop = box.scrollHeight;
      } else if (event.type === "done") {
        finished = true;
        render(event.view);
      } else if (event.type === "error") {
        finished = true;
        render(event.view);
        $("message-input").value = text; // keep it for another try
        throw new Error(event.message);
      }
    };
    let broken = false; // the connection failed mid-answer (server stopped, network gone)
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (value) buffer += decoder.decode(value, {stream: true});
        let cut;
        while ((cut = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 1);
          if (line.trim()) handle(JSON.parse(line));
        }
        if (done) break;
      }
    } catch (err) {
      if (finished) throw err; // the server's own error event, already shown with its view
      broken = true;
    }
    if (!finished) await unsent(text, [user, answer], broken);
  }

  // An answer that never finished: take its pending message and partial answer off the page,
  // show the conversation as the server has it (when it answers), keep the text, and say so.
  async function unsent(text, pending, broken) {
    for (const node of pending) node.remove();
    let reachable = true;
    try { await load(session()); } catch (err) { reachable = false; }
    $("message-input").value = text;
    const what = broken ? "the connection to the server broke before the answer was complete"
      : "the answer was cut off";
    throw new Error(what + (reachable ? "" : " (is gatekeeper-chat --web still running?)") +
      "; your message was not added to the conversation, send it again");
  }

  async function preview(instruction) {
    render(await call("/api/edit/preview", {session: session(), instruction, head: head()}));
  }

  function submit() {
    const input = $("message-input");
    const text = input.value.trim();
    if (!text || state.busy) return;
    act(async () => {
      input.value = "";
      try {
        await perform(text);
      } catch (err) {
        if (!input.value) input.value = text; // failed: the text stays for another try
        throw err;
      }
    });
  }

  // What the box's text does: /edit [instruction], /chat, /undo or /redo; otherwise a message
  // (chat mode) or an edit instruction (edit mode).
  async function perform(text) {
    const command = text.match(/^\/(\w+)\s*([\s\S]*)$/);
    if (!command) {
      if (state.editing) await preview(text); else await sendChat(text);
      return;
    }
    const [, name, rest] = command;
    if (name === "edit") {
      if (rest.trim()) await preview(rest.trim()); else setMode(!state.editing);
    } else if (name === "chat") setMode(false);
    else if (name === "undo") render(await call("/api/undo", {session: session(), head: head()}));
    else if (name === "redo") render(await call("/api/redo", {session: session(), head: head()}));
    else throw new Error("unknown command /" + name + ": the box knows /edit [instruction], /chat, /undo and /redo");
  }

  // -- wiring ----------------------------------------------------------------------
  $("composer").addEventListener("submit", (event) => { event.preventDefault(); submit(); });
  $("message-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); submit(); }
  });
  $("mode-toggle").addEventListener("click", () => setMode(!state.editing));
  $("error-close").addEventListener("click", clearError);
  $("commit").addEventListener("click", () => act(async () => {
    const p = state.view.preview;
    render(await call("/api/edit/commit", {session: session(), token: p.token, confirm_large: p.needs_confirmation}));
  }));
  $("discard").addEventListener("click", () => act(async () => {
    render(await call("/api/edit/discard", {session: session(), token: state.view.preview.token}));
  }));
  $("undo").addEventListener("click", () => act(async () => render(await call("/api/undo", {session: session(), head: head()}))));
  $("redo").addEventListener("click", () => act(async () => render(await call("/api/redo", {session: session(), head: head()}))));
  $("new-session").addEventListener("click", () => act(async () => render(await call("/api/sessions/new", {}))));
  function closeDeleteBar() {
    state.deleting = null;
    $("confirm-delete-bar").hidden = true;
  }
  $("delete-session").addEventListener("click", () => {
    state.deleting = state.session;
    setText($("confirm-delete-text"), "Delete session “" + state.deleting + "” with its whole history? This cannot be undone.");
    $("confirm-delete-bar").hidden = false;
  });
  $("cancel-delete").addEventListener("click", closeDeleteBar);
  $("confirm-delete").addEventListener("click", () => act(async () => {
    const name = state.deleting; // the session the bar named, whatever is shown now
    closeDeleteBar();
    if (name === null) return;
    const left = (await call("/api/sessions/delete", {session: name, confirm: name})).sessions;
    await load(left.length ? left[0] : "default");
  }));
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && !state.busy && state.view) act(() => load(state.session), true);
  });

  renderMode();
  act(() => load(state.session));
})();
