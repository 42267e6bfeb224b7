// Live updates for dashboard pages, over /ws/dashboard/ (queueadmin/dashboard/consumers.py; under the
// site's path prefix when it has one: the body's data-live-socket).
//
// The server sends redrawn fragments ({"fragments": {id: html}}); each is
// morphed into the element with that id (idiomorph, vendored), with no page
// reload. A morph changes only what differs, so what the operator is doing
// survives an update: an open <details>, focus and the text being typed,
// a field's edited value, scroll positions and selected text. Rows are
// matched by their key (data-key, data-job-id, data-row, data-group,
// data-entry), so an open group stays with its group when others arrive.
// A fragment marked data-freeze-when-selected is held back while the
// operator has rows selected in it, so rows never move under the cursor:
// the page shows "N new — show" instead, and applies it on click or when
// the selection is cleared. "Freeze" in the header (or the f key) holds
// every fragment the same way, whatever is selected, until "Unfreeze"
// applies them. The socket reconnects by itself, backing off up
// to 10 s, and closes while the tab is hidden (it reconnects, and catches
// up, on return). After each update the event "queueadmin:updated" is sent
// on the updated element, for ui.js (times, phone labels).
//
// Where websockets do not get through (a proxy that refuses the upgrade),
// the socket fails before it ever opens. After FALLBACK_AFTER such failures
// in a row the page polls instead: it reads itself over plain HTTP every
// POLL_MS, takes the same fragments (the body's data-live-partials) from the
// fresh page and applies them as a socket update would, and keeps trying the
// socket now and then (every 60 s at most); once one opens, polling stops.
(function () {
  "use strict";
  const body = document.body;
  if (!body.dataset.livePage) return;
  const badge = document.getElementById("live-state");
  const held = new Map(); // fragment id -> html held back while selecting
  let asOf = null;
  let delay = 1000;
  let socket = null;
  let timer = null; // a pending reconnect
  let stopped = false; // signed out or not allowed: reconnecting would not help
  const FALLBACK_AFTER = 3;
  const POLL_MS = 5000;
  const partials = (body.dataset.livePartials || "").split(" ").filter(Boolean);
  let failures = 0; // sockets closed before they opened, in a row
  let poller = null; // the polling interval, while polling

  function setState(state, text) {
    if (!badge) return;
    badge.dataset.state = state;
    const at = asOf && window.queueadmin ? window.queueadmin.formatTime(asOf) : asOf && asOf.toISOString();
    badge.textContent = text + (at ? " · data as of " + at : "");
  }

  function selected(root) {
    return root.querySelectorAll("input[data-select]:checked");
  }

  function rowIds(root) {
    return new Set(Array.from(root.querySelectorAll("[data-job-id]"), (el) => el.dataset.jobId));
  }

  // Rows carry a key but no id; idiomorph matches elements by id, so the
  // keys are given to it as ids (on both sides) before each morph.
  const KEYS = ["data-key", "data-job-id", "data-row", "data-group", "data-entry"];
  function keyIds(root) {
    for (const attr of KEYS) {
      root.querySelectorAll("[" + attr + "]:not([id])").forEach((el) => {
        el.id = "live-key:" + attr + ":" + el.getAttribute(attr);
      });
    }
  }

  // The state the operator owns: the server's HTML never overrides it.
  function userOwned(attr, el) {
    if (attr === "open") return el instanceof HTMLDetailsElement;
    if (attr === "data-label") return true; // ui.js labels phone cards
    if (el instanceof HTMLInputElement) {
      if (el.type === "hidden") return false;
      if (attr === "checked") return el.checked !== el.defaultChecked;
      if (attr === "value") return el === document.activeElement || el.value !== el.defaultValue;
    }
    if (el instanceof HTMLTextAreaElement && attr === "value") {
      return el === document.activeElement || el.value !== el.defaultValue;
    }
    if (el instanceof HTMLOptionElement && attr === "selected") {
      const select = el.closest("select");
      return !!select && Array.from(select.options).some((o) => o.selected !== o.defaultSelected);
    }
    return false;
  }

  const MORPH = {
    morphStyle: "outerHTML",
    ignoreActiveValue: true,
    restoreFocus: true,
    callbacks: {
      beforeAttributeUpdated: (attr, el) => !userOwned(attr, el),
      // A <time> that ui.js rendered in the local zone is left as it is
      // while it names the same moment.
      beforeNodeMorphed: (old, fresh) => !(old instanceof HTMLTimeElement && fresh instanceof HTMLTimeElement &&
        old.dataset.when !== undefined && old.dateTime === fresh.dateTime && old.dataset.when === fresh.dataset.when),
    },
  };

  function replace(id, html) {
    const el = document.getElementById(id);
    if (!el) return;
    const tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    const fresh = tpl.content.firstElementChild;
    if (!fresh) return;
    keyIds(el);
    keyIds(tpl.content);
    if (window.Idiomorph) {
      window.Idiomorph.morph(el, fresh, MORPH);
    } else {
      el.replaceWith(fresh);
    }
    const now = document.getElementById(id);
    if (!now) return;
    if (window.htmx) window.htmx.process(now);
    now.dispatchEvent(new CustomEvent("queueadmin:updated", { bubbles: true }));
  }

  function showHeld() {
    const note = document.getElementById("live-pending-note");
    if (!note) return;
    if (held.size === 0) { note.hidden = true; return; }
    let fresh = 0;
    let gone = 0;
    held.forEach((html, id) => {
      const el = document.getElementById(id);
      const tpl = document.createElement("template");
      tpl.innerHTML = html;
      const now = el ? rowIds(el) : new Set();
      const next = rowIds(tpl.content);
      next.forEach((rid) => { if (!now.has(rid)) fresh += 1; });
      now.forEach((rid) => { if (!next.has(rid)) gone += 1; });
    });
    // Say what waits, the same way whatever it is (the walk found "1 new — show" beside "Updates — show").
    const parts = [];
    if (fresh) parts.push(fresh + (fresh === 1 ? " new job" : " new jobs"));
    if (gone) parts.push(gone + (gone === 1 ? " job left" : " jobs left") + " this list");
    const button = note.querySelector("[data-show-pending]");
    button.textContent = "Held while rows are selected: " + (parts.length ? parts.join(", ") : "changes to these rows")
      + " — show";
    note.hidden = false;
  }

  function applyHeld() {
    held.forEach((html, id) => replace(id, html));
    held.clear();
    showHeld();
    syncSelection();
  }

  let frozen = false; // the operator froze updates (Freeze, or f)
  const freezeButton = document.querySelector("[data-freeze-toggle]");
  function showFrozen() {
    if (!freezeButton) return;
    freezeButton.setAttribute("aria-pressed", frozen ? "true" : "false");
    freezeButton.textContent = !frozen ? "Freeze" : "Unfreeze" + (held.size ? " (" + held.size + " held)" : "");
  }
  function setFrozen(on) {
    frozen = on;
    if (!frozen) {
      // Through apply() again: a table with rows selected stays held.
      const pending = Object.fromEntries(held);
      held.clear();
      apply(pending);
    }
    showFrozen();
  }

  function apply(fragments) {
    for (const [id, html] of Object.entries(fragments)) {
      const el = document.getElementById(id);
      if (frozen || (el && el.hasAttribute("data-freeze-when-selected") && selected(el).length)) {
        held.set(id, html);
      } else {
        held.delete(id);
        replace(id, html);
      }
    }
    showHeld();
    showFrozen();
    // A job page rendered before its job was in the document has no payload card, which live updates do not
    // carry: once the job is found, the page is read again whole.
    if (document.querySelector("[data-reload-when-found]") && document.querySelector("#live-job[data-found]")) {
      location.reload();
    }
  }

  // -- selection (jobs page) -------------------------------------------------
  function syncSelection() {
    const form = document.getElementById("selection");
    if (!form) return;
    const ids = Array.from(selected(document), (el) => el.value);
    form.querySelector("[data-selection-ids]").value = ids.join(" ");
    form.querySelector("[data-selection-count]").textContent = ids.length + " selected";
    form.querySelectorAll("[data-needs-selection]").forEach((b) => { b.disabled = ids.length === 0; });
    syncSelectAll();
    if (ids.length === 0 && held.size && !frozen) applyHeld();
  }

  // The header's "select all on this page" box: checked when every row is,
  // half-checked when some are.
  function syncSelectAll() {
    document.querySelectorAll("input[data-select-all]").forEach((all) => {
      const root = all.closest("table") || document;
      const boxes = root.querySelectorAll("input[data-select]").length;
      const checked = selected(root).length;
      all.checked = boxes > 0 && checked === boxes;
      all.indeterminate = checked > 0 && checked < boxes;
    });
  }

  document.addEventListener("change", (event) => {
    if (event.target.matches("input[data-select]")) syncSelection();
    if (event.target.matches("input[data-select-all]")) {
      const root = event.target.closest("table") || document;
      root.querySelectorAll("input[data-select]").forEach((el) => { el.checked = event.target.checked; });
      syncSelection();
    }
  });
  document.addEventListener("click", (event) => {
    if (event.target.closest("[data-freeze-toggle]")) { setFrozen(!frozen); return; }
    const target = event.target.closest("[data-show-pending], [data-close-panel]");
    if (!target) return;
    if (target.matches("[data-show-pending]")) {
      document.querySelectorAll("input[data-select]:checked").forEach((el) => { el.checked = false; });
      applyHeld();
    } else {
      const panel = document.getElementById("action-panel");
      if (panel && panel.contains(target)) { event.preventDefault(); panel.innerHTML = ""; }
    }
  });

  // -- polling, when the socket cannot open ----------------------------------
  function poll() {
    fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then((response) => {
        const url = new URL(response.url);
        if (response.redirected && url.pathname.indexOf("/login") !== -1) throw new Error("signed out");
        if (response.status === 403) throw new Error("not allowed");
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then((html) => {
        if (!poller) return; // the socket opened meanwhile: its updates win
        const page = new DOMParser().parseFromString(html, "text/html");
        const fragments = {};
        for (const id of partials) {
          const el = page.getElementById(id);
          if (el) fragments[id] = el.outerHTML;
        }
        asOf = new Date();
        apply(fragments);
        setState("polling", "polling every " + POLL_MS / 1000 + " s (no websocket)");
      })
      .catch((error) => {
        if (error.message === "signed out" || error.message === "not allowed") {
          stopPolling();
          stopped = true;
          if (timer) { clearTimeout(timer); timer = null; }
          setState("offline", error.message === "signed out" ? "signed out: reload to sign in" : "not allowed");
        } else if (error instanceof TypeError) {
          // The server itself is unreachable (a restart, say), not only its
          // websockets: back to the socket's quick reconnects, which poll
          // again after FALLBACK_AFTER failures if only the socket stays shut.
          stopPolling();
          failures = 0;
          delay = 1000;
          if (!socket) {
            if (timer) clearTimeout(timer);
            timer = setTimeout(() => { timer = null; connect(); }, delay);
          }
          setState("reconnecting", "reconnecting…");
        } else {
          setState("reconnecting", "polling: the page answered " + error.message);
        }
      });
  }
  function startPolling() {
    if (poller || stopped || partials.length === 0) return;
    poller = setInterval(poll, POLL_MS);
    poll();
  }
  function stopPolling() {
    if (poller) { clearInterval(poller); poller = null; }
  }

  // -- the socket ------------------------------------------------------------
  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const path = encodeURIComponent(location.pathname + location.search);
    let opened = false;
    try {
      socket = new WebSocket(scheme + "//" + location.host + (body.dataset.liveSocket || "/ws/dashboard/") +
        "?path=" + path);
    } catch (error) { // no WebSocket at all, or a URL the browser refuses
      socket = null;
      failures = FALLBACK_AFTER;
      startPolling();
      return;
    }
    if (!poller) setState("connecting", "connecting…");
    socket.onopen = () => { opened = true; failures = 0; stopPolling(); delay = 1000; setState("live", "live"); };
    socket.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      asOf = msg.as_of ? new Date(msg.as_of) : new Date();
      if (msg.type === "update") {
        apply(msg.fragments || {});
        body.dataset.liveSeq = msg.seq;
        setState("live", "live");
      } else if (msg.type === "tick") {
        setState("live", "live");
      } else if (msg.type === "error") {
        setState("error", "queue unreadable: " + msg.error);
      }
    };
    socket.onclose = (event) => {
      socket = null;
      if (document.hidden) { setState("paused", "paused while hidden"); return; }
      if (event.code === 4401 || event.code === 4403) {
        stopped = true;
        setState("offline", event.code === 4401 ? "signed out: reload to sign in" : "not allowed");
        return;
      }
      failures = opened ? 0 : failures + 1;
      if (failures >= FALLBACK_AFTER) startPolling();
      if (!poller) setState("reconnecting", "reconnecting…");
      timer = setTimeout(() => { timer = null; connect(); }, delay);
      delay = Math.min(delay * 2, poller ? 60000 : 10000);
    };
  }
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      stopPolling();
      if (socket) socket.close(1000);
      if (!socket && timer) { clearTimeout(timer); timer = null; setState("paused", "paused while hidden"); }
    } else if (!socket && !timer && !stopped) {
      delay = 1000;
      if (failures >= FALLBACK_AFTER) startPolling();
      connect();
    }
  });
  // f: freeze or unfreeze updates (never while typing; keys.js lists it).
  document.addEventListener("keydown", (event) => {
    if (event.key !== "f" || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target instanceof Element && event.target.closest("input, textarea, select, [contenteditable]")) return;
    if (document.querySelector("dialog[open]")) return;
    event.preventDefault();
    setFrozen(!frozen);
  });
  syncSelection();
  connect();
})();
