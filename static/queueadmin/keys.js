// Keyboard shortcuts for the dashboard. Press ? on any page for the list.
//
//   /          focus the search (the jobs page's filter; from elsewhere,
//              go to the jobs page and focus it there)
//   j / k      move the highlighted row down / up in the page's tables
//   Enter      open the highlighted row (its first link)
//   x          select or unselect the highlighted row (the jobs page)
//   r / p      requeue / purge the selected rows: opens the action's dry
//              run, exactly as its button does (nothing runs without it)
//   g then o, j, w, c, d, a, s
//              go to Overview, Jobs, Workers, Schedules (cron), Dead letters, Audit log, Submit
//   f          freeze or unfreeze live updates (live.js handles it)
//   ?          show or hide this list; Esc closes it
//   Esc        leave the field being typed in (so that the keys work again),
//              or close an open dry run (as its Cancel does)
//
// Keys never fire while the operator types in a field, or with Ctrl, Alt
// or Meta held (the browser's own shortcuts). The pages are found through
// the navigation's links (data-go), so the script knows no URL. A highlighted
// row keeps its highlight across live updates (live.js), by its key.
(function () {
  "use strict";
  const GO_TIMEOUT_MS = 1500;
  const KEYS = ["data-key", "data-job-id", "data-row", "data-group", "data-entry"];
  let current = null; // the highlighted row's key, "attr=value"
  let goPending = 0; // when "g" was pressed, or 0
  let dialog = null;

  function typing(target) {
    return target instanceof Element && !!target.closest("input, textarea, select, [contenteditable]:not([contenteditable=false])");
  }

  // -- rows ------------------------------------------------------------------
  function rows() {
    return Array.from(document.querySelectorAll("main table.data tbody tr")).filter((tr) => tr.querySelector("a[href]"));
  }
  function keyOf(tr) {
    for (const attr of KEYS) if (tr.hasAttribute(attr)) return attr + "=" + tr.getAttribute(attr);
    const link = tr.querySelector("a[href]");
    return link ? "href=" + link.getAttribute("href") : null;
  }
  function highlighted() {
    return current === null ? null : rows().find((tr) => keyOf(tr) === current) || null;
  }
  function mark(tr) {
    document.querySelectorAll("tr.key-current").forEach((el) => { if (el !== tr) el.classList.remove("key-current"); });
    if (!tr) { current = null; return; }
    tr.classList.add("key-current");
    current = keyOf(tr);
    tr.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    const all = rows();
    if (!all.length) return;
    const at = all.indexOf(highlighted());
    const next = at === -1 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
    mark(all[next]);
  }
  function open() {
    const tr = highlighted();
    const link = tr && tr.querySelector("a[href]");
    if (link) link.click();
  }

  // -- selection (the jobs page) ----------------------------------------------------
  function toggleSelected() {
    const tr = highlighted();
    const box = tr && tr.querySelector("input[data-select]");
    if (!box) return;
    box.checked = !box.checked;
    box.dispatchEvent(new Event("change", { bubbles: true })); // live.js counts the selection
  }
  // The selection form's own button: its dry run, its permission (a button
  // the operator may not use is not on the page), and nothing if none is selected.
  function actOnSelection(action) {
    const button = document.querySelector('#selection button[name=action][value="' + action + '"]');
    if (button && !button.disabled) button.click();
  }

  // -- search and pages ------------------------------------------------------------
  function searchField() {
    return document.querySelector("form[role=search] input:not([type=hidden])");
  }
  function focusSearch() {
    const field = searchField();
    if (field) {
      field.focus();
      field.select();
      return;
    }
    const jobs = document.querySelector("a[data-go=j]");
    if (jobs) location.href = jobs.href + "#search";
  }
  function go(letter) {
    const link = document.querySelector('a[data-go="' + letter + '"]');
    if (link) location.href = link.href;
  }

  // -- help ----------------------------------------------------------------------------
  const HELP = [
    ["/", "Focus the search"],
    ["j / k", "Next / previous row"],
    ["Enter", "Open the highlighted row"],
    ["x", "Select or unselect the highlighted row"],
    ["r", "Requeue the selected rows (dry run first)"],
    ["p", "Purge the selected rows (dry run first)"],
    ["s", "Stop the selected running rows (dry run first)"],
    ["n", "Run the selected delayed rows now (dry run first)"],
    ["g o", "Overview"], ["g j", "Jobs"], ["g w", "Workers"], ["g c", "Schedules"],
    ["g d", "Dead letters"], ["g a", "Audit log"], ["g s", "Submit a job"],
    ["f", "Freeze or unfreeze live updates"],
    ["?", "Show or hide this list"],
    ["Esc", "Leave the field being typed in, or close the dry run"],
  ];
  function help() {
    if (!dialog) {
      dialog = document.createElement("dialog");
      dialog.className = "keys-help";
      dialog.setAttribute("aria-labelledby", "keys-help-title");
      const title = document.createElement("h2");
      title.id = "keys-help-title";
      title.textContent = "Keyboard shortcuts";
      const list = document.createElement("dl");
      for (const [keys, what] of HELP) {
        const dt = document.createElement("dt");
        keys.split(" ").forEach((k, i) => {
          if (i) dt.append(" ");
          if (k === "/" && keys !== "/") { dt.append("/"); return; }
          const kbd = document.createElement("kbd");
          kbd.textContent = k;
          dt.append(kbd);
        });
        const dd = document.createElement("dd");
        dd.textContent = what;
        list.append(dt, dd);
      }
      const close = document.createElement("button");
      close.type = "button";
      close.textContent = "Close";
      close.addEventListener("click", () => dialog.close());
      dialog.append(title, list, close);
      document.body.append(dialog);
    }
    if (dialog.open) dialog.close(); else dialog.showModal();
  }

  document.addEventListener("keydown", (event) => {
    if (event.defaultPrevented || event.isComposing || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape" && !(dialog && dialog.open)) {
      if (typing(event.target)) { event.target.blur(); return; }
      const close = document.querySelector("#action-panel [data-close-panel]");
      if (close) { event.preventDefault(); close.click(); }
      return;
    }
    if (typing(event.target)) return;
    if (dialog && dialog.open) {
      if (event.key === "?") { event.preventDefault(); dialog.close(); }
      return; // Esc is the dialog's own
    }
    const now = Date.now();
    if (goPending && now - goPending < GO_TIMEOUT_MS) {
      goPending = 0;
      if ("ojwcdas".includes(event.key) && event.key.length === 1) { event.preventDefault(); go(event.key); }
      return;
    }
    goPending = 0;
    switch (event.key) {
      case "/": event.preventDefault(); focusSearch(); break;
      case "j": event.preventDefault(); move(1); break;
      case "k": event.preventDefault(); move(-1); break;
      case "Enter":
        // A focused link or button keeps its own Enter.
        if (highlighted() && !(event.target instanceof Element && event.target.closest("a, button, summary"))) {
          event.preventDefault();
          open();
        }
        break;
      case "x": event.preventDefault(); toggleSelected(); break;
      case "r": event.preventDefault(); actOnSelection("requeue"); break;
      case "p": event.preventDefault(); actOnSelection("purge"); break;
      case "s": event.preventDefault(); actOnSelection("stop"); break;
      case "n": event.preventDefault(); actOnSelection("run_now"); break;
      case "g": goPending = now; break;
      case "?": event.preventDefault(); help(); break;
      default: break;
    }
  });
  document.addEventListener("click", (event) => {
    if (event.target instanceof Element && event.target.closest("[data-keys-help]")) help();
  });
  // A live update redraws rows: put the highlight back on the same row.
  document.addEventListener("queueadmin:updated", () => {
    const tr = highlighted();
    if (tr && !tr.classList.contains("key-current")) tr.classList.add("key-current");
  });
  document.addEventListener("DOMContentLoaded", () => {
    if (location.hash === "#search" && searchField()) focusSearch();
  });
})();
