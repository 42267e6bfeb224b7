// The operator's display preferences, kept in this browser: light or dark
// (following prefers-color-scheme until the operator picks), and times in
// UTC or in the browser's own zone. Loaded without defer from <head>, so the
// theme is set before the first paint (no flash of the other theme).
//
// Times: the server renders every time once, in UTC, as
// <time datetime="…Z" data-when="s|ms">2026-12-01 17:39:47 UTC</time>
// (queueadmin/templatetags/dashboard.py, filter "when"); with local chosen,
// this script shows the same format in the browser's zone, labelled with its
// offset ("2026-12-01 18:39:47 UTC+01:00"), and the UTC time as a tooltip.
// The choice is a cookie (queueadmin_tz), so every tab and page agrees.
//
// On a phone, tables become stacked cards (app.css); each cell is labelled
// here with its column's heading (data-label), so templates need no labels.
// Live updates (live.js) send "queueadmin:updated" on what they changed.
(function () {
  "use strict";
  const root = document.documentElement;
  const THEME_KEY = "queueadmin-theme";
  const TZ_COOKIE = "queueadmin_tz";
  const dark = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  // -- theme -----------------------------------------------------------------
  function chosenTheme() {
    try { return localStorage.getItem(THEME_KEY); } catch (e) { return null; }
  }
  function applyTheme() {
    const theme = chosenTheme();
    if (theme === "light" || theme === "dark") root.dataset.theme = theme;
    else delete root.dataset.theme;
  }
  function effectiveTheme() {
    return root.dataset.theme || (dark && dark.matches ? "dark" : "light");
  }
  function toggleTheme() {
    const next = effectiveTheme() === "dark" ? "light" : "dark";
    const system = dark && dark.matches ? "dark" : "light";
    try {
      // Back to the system's choice means following it again.
      if (next === system) localStorage.removeItem(THEME_KEY);
      else localStorage.setItem(THEME_KEY, next);
    } catch (e) { /* storage off: this page only */ }
    if (next === system) delete root.dataset.theme; else root.dataset.theme = next;
    labelToggles();
  }
  applyTheme();

  // -- times -----------------------------------------------------------------
  function localTimes() {
    return document.cookie.split("; ").indexOf(TZ_COOKIE + "=local") !== -1;
  }
  function pad(n, width) { return String(n).padStart(width || 2, "0"); }
  function formatTime(date, precision, local) {
    if (isNaN(date.getTime())) return "—";
    const p = local
      ? [date.getFullYear(), date.getMonth(), date.getDate(), date.getHours(), date.getMinutes(), date.getSeconds()]
      : [date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate(), date.getUTCHours(), date.getUTCMinutes(),
        date.getUTCSeconds()];
    let text = p[0] + "-" + pad(p[1] + 1) + "-" + pad(p[2]) + " " + pad(p[3]) + ":" + pad(p[4]) + ":" + pad(p[5]);
    if (precision === "ms") text += "." + pad(date.getMilliseconds(), 3);
    if (!local) return text + " UTC";
    const offset = -date.getTimezoneOffset();
    const sign = offset < 0 ? "-" : "+";
    return text + " UTC" + sign + pad(Math.floor(Math.abs(offset) / 60)) + ":" + pad(Math.abs(offset) % 60);
  }
  function renderTimes(scope) {
    const local = localTimes();
    scope.querySelectorAll("time[data-when]").forEach((el) => {
      const date = new Date(el.dateTime);
      const text = formatTime(date, el.dataset.when, local);
      if (el.textContent !== text) el.textContent = text;
      const title = local ? formatTime(date, el.dataset.when, false) : "";
      if (title) el.title = title; else el.removeAttribute("title");
    });
    scope.querySelectorAll("time[data-when-title]").forEach((el) => {
      el.title = formatTime(new Date(el.dateTime), "s", local);
    });
  }
  function toggleZone() {
    const next = localTimes() ? "utc" : "local";
    document.cookie = TZ_COOKIE + "=" + next + "; path=/; max-age=31536000; samesite=lax";
    renderTimes(document);
    labelToggles();
  }

  // -- phone cards -------------------------------------------------------------
  function labelCells(scope) {
    const tables = scope.matches && scope.matches("table.data") ? [scope] : scope.querySelectorAll("table.data");
    tables.forEach((table) => {
      const heads = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent.trim());
      table.querySelectorAll("tbody tr").forEach((tr) => {
        Array.from(tr.children).forEach((cell, i) => {
          const label = heads[i] || "";
          if (label && cell.dataset.label !== label) cell.dataset.label = label;
        });
      });
    });
  }

  // -- toggles -------------------------------------------------------------------
  function labelToggles() {
    document.querySelectorAll("[data-toggle-theme]").forEach((b) => {
      const isDark = effectiveTheme() === "dark";
      b.textContent = isDark ? "☀ Light" : "☾ Dark";
      b.setAttribute("aria-pressed", String(isDark));
      b.title = isDark ? "Switch to the light theme" : "Switch to the dark theme";
    });
    document.querySelectorAll("[data-toggle-tz]").forEach((b) => {
      const local = localTimes();
      b.textContent = local ? "Times: local" : "Times: UTC";
      b.title = local ? "Times are in this browser's zone; show them in UTC" : "Times are in UTC; show them in this browser's zone";
    });
  }

  document.addEventListener("click", (event) => {
    const target = event.target.closest && event.target.closest("[data-toggle-theme], [data-toggle-tz]");
    if (!target) return;
    event.preventDefault();
    if (target.matches("[data-toggle-theme]")) toggleTheme(); else toggleZone();
  });
  document.addEventListener("queueadmin:updated", (event) => {
    renderTimes(event.target);
    labelCells(event.target);
  });
  if (dark && dark.addEventListener) dark.addEventListener("change", labelToggles);
  document.addEventListener("DOMContentLoaded", () => {
    renderTimes(document);
    labelCells(document);
    labelToggles();
  });
  // A field's error from the last post goes once the field is edited: it described what was there
  // then (the browser's own checks may keep the next post from ever reaching the server).
  document.addEventListener("input", (event) => {
    const label = event.target instanceof Element ? event.target.closest("form.stack label") : null;
    const error = label && label.querySelector(":scope > .error");
    if (error) error.remove();
  });
  // htmx swaps (action panels, the submit form) get the same treatment.
  document.addEventListener("htmx:afterSettle", (event) => {
    renderTimes(event.target);
    labelCells(event.target);
    // A new dry run opens: the last action's message ("Purged 4 jobs.") would read as this one's result.
    if (event.target instanceof Element && event.target.id === "action-panel" && event.target.childElementCount) {
      document.querySelectorAll("main > ul.messages").forEach((el) => el.remove());
    }
  });

  window.queueadmin = Object.assign(window.queueadmin || {}, {
    formatTime: (date, precision) => formatTime(date, precision || "s", localTimes()),
  });
})();
