// onestep dashboard (docs/ui.md). No library: fetches server-rendered fragments with the
// token from sessionStorage in the Authorization header (never in a URL), and calls the JSON API
// for actions. Every action asks for confirmation in a <dialog> and shows its outcome.
"use strict";
(function () {
  const KEY = "onestep.token";
  const app = document.getElementById("app");
  const flash = document.getElementById("flash");
  const login = document.getElementById("login");
  let refreshTimer = null;
  let me = null;

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const t = sessionStorage.getItem(KEY);
    if (t) h["Authorization"] = "Bearer " + t;
    return h;
  }

  function say(text, kind) {
    flash.textContent = text;
    flash.className = "flash " + (kind || "info");
    flash.hidden = false;
  }

  function showLogin(message) {
    app.hidden = true;
    login.hidden = false;
    document.getElementById("login-error").textContent = message || "";
    document.getElementById("token").focus();
  }

  async function fragment(path) {
    const r = await fetch(path, { headers: headers() });
    if (r.status === 401) {
      // Before whoami has answered, whoami decides what the login form says (start()).
      if (me) {
        sessionStorage.removeItem(KEY);
        showLogin("That token is not valid here.");
      }
      throw new Error("unauthorized");
    }
    const text = await r.text();
    if (!r.ok) {
      let msg = text;
      try { msg = JSON.parse(text).message; } catch (_) { /* not JSON */ }
      throw new Error(msg);
    }
    return text;
  }

  async function call(method, path, body, extra) {
    const r = await fetch(path, {
      method: method,
      headers: headers(Object.assign({ "Content-Type": "application/json" }, extra || {})),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await r.json(); } catch (_) { data = null; }
    if (!r.ok) {
      throw new Error((data && data.message) || ("HTTP " + r.status));
    }
    return data;
  }

  function confirmAction(text, withReason) {
    const d = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = text;
    const reason = document.getElementById("confirm-reason");
    reason.value = "";
    reason.parentElement.hidden = !withReason;
    return new Promise(function (resolve) {
      function done(ok) {
        d.close();
        document.getElementById("confirm-ok").onclick = null;
        document.getElementById("confirm-cancel").onclick = null;
        resolve(ok ? { reason: reason.value.trim() || undefined } : null);
      }
      document.getElementById("confirm-ok").onclick = function () { done(true); };
      document.getElementById("confirm-cancel").onclick = function () { done(false); };
      d.showModal();
    });
  }

  function filters() {
    const form = document.getElementById("filters");
    const out = {};
    if (!form) return out;
    new FormData(form).forEach(function (v, k) {
      const s = String(v).trim();
      if (s) out[k] = s;
    });
    return out;
  }

  // A performance mark when a page's content first lands (docs/ui.md#page-load-times): the
  // mark's startTime is milliseconds since the navigation started, so it covers the shell, the
  // assets, whoami and the fragment; devtools show it, and the browser tests read it.
  function loaded(name) {
    const n = "onestep:" + name;
    if (performance.getEntriesByName(n).length === 0) performance.mark(n);
  }

  function query(obj) {
    const p = new URLSearchParams();
    Object.keys(obj).forEach(function (k) { p.set(k, obj[k]); });
    return p.toString();
  }

  // ---------- list page
  let cursor = null;
  async function loadList() {
    const f = filters();
    history.replaceState(null, "", "/ui" + (Object.keys(f).length ? "?" + query(f) : ""));
    const q = Object.assign({}, f);
    if (cursor) q.cursor = cursor;
    const html = await fragment("/ui/fragments/list?" + query(q));
    stopList();
    document.getElementById("list").innerHTML = html;
    loaded("list");
    clearTimeout(refreshTimer);
    followList();
  }

  // The list's live rows follow one event stream (GET /v1/executions/events?ids=…, read with
  // fetch so that the token stays in the header), which updates them in place; it starts at the
  // versions the page shows (Last-Event-ID) and resumes from its last event id when the server
  // closes it before every row has ended. Only when the stream cannot be opened does the page
  // re-read the list every 2 s (docs/ui.md#list).
  let listStream = null;
  function stopList() {
    if (listStream) listStream.abort();
    listStream = null;
  }

  // Server-sent events of a response body: calls on(name, id, data) for each event.
  async function readEvents(body, on) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const part = await reader.read();
      if (part.done) return;
      buf += decoder.decode(part.value, { stream: true });
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let name = "message", id = null;
        const data = [];
        block.split("\n").forEach(function (line) {
          if (line.startsWith(":")) return;
          const at = line.indexOf(":");
          const field = at < 0 ? line : line.slice(0, at);
          let value = at < 0 ? "" : line.slice(at + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") name = value;
          else if (field === "id") id = value;
          else if (field === "data") data.push(value);
        });
        if (data.length) on(name, id, JSON.parse(data.join("\n")));
      }
    }
  }

  function liveRows() {
    return Array.from(document.querySelectorAll("#rows tr.row"))
      .filter(function (r) { return r.dataset.terminal !== "true"; });
  }

  // Control, bidirectional and zero-width characters as visible escapes, as the server renders
  // every tenant text (onestep_core::text::visible, docs/security.md#invisible-characters).
  function visible(text) {
    return String(text).replace(
      /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u200b-\u200d\u2060\ufeff]/g,
      function (c) {
        if (c === "\n") return "\\n";
        if (c === "\r") return "\\r";
        if (c === "\t") return "\\t";
        return "\\u{" + c.charCodeAt(0).toString(16) + "}";
      });
  }

  // One event of the list stream applied to its row (text only: textContent, never HTML).
  function applyListEvent(name, data) {
    const row = document.querySelector("#rows tr.row[data-id='" + CSS.escape(String(data.execution_id)) + "']");
    if (!row) return;
    const status = row.querySelector(".c-status .status");
    if (name === "status") {
      row.dataset.status = data.status;
      row.dataset.version = String(data.version);
      row.dataset.terminal = data.terminal ? "true" : "false";
      status.className = "status s-" + data.status;
      status.textContent = data.status;
      status.title = "";
      row.querySelector(".c-attempts").textContent = String(data.attempts);
      row.querySelector(".c-finished").textContent =
        data.finished_at ? new Date(data.finished_at).toISOString() : "";
      const e = data.error;
      row.querySelector(".c-error").textContent = e
        ? visible(e.exception_type + " (" + e.kind + (e.stage ? ", " + e.stage : "") + ")") : "";
    } else if (name === "progress") {
      status.title = "attempt " + data.attempt + ": " + data.done + "/" + data.total +
        (data.note ? " " + visible(data.note) : "");
    }
  }

  async function followList() {
    const rows = liveRows();
    if (!rows.length) return;
    const ctl = new AbortController();
    listStream = ctl;
    const ids = rows.map(function (r) { return r.dataset.id; });
    let last = rows.map(function (r) { return r.dataset.version; }).join(",");
    for (;;) {
      let ok = false, got = 0;
      try {
        const r = await fetch("/v1/executions/events?ids=" + ids.join(","), {
          headers: headers({ "Accept": "text/event-stream", "Last-Event-ID": last }),
          signal: ctl.signal,
        });
        if (r.ok && r.body) {
          ok = true;
          await readEvents(r.body, function (name, id, data) {
            if (id) last = id;
            got += 1;
            if (listStream === ctl) applyListEvent(name, data);
          });
        }
      } catch (_) {
        ok = false;
      }
      if (listStream !== ctl) return;
      if (!ok) {
        // The stream failed: poll the list instead (the next load tries the stream again).
        listStream = null;
        refreshTimer = setTimeout(function () { loadList().catch(function () {}); }, 2000);
        return;
      }
      // Closed by the server: every row ended, or the stream's time ran out (resume). A row
      // whose execution no longer exists never ends: a stream that closed without an event
      // re-reads the list once instead.
      if (!ids.some(function (id) {
        const row = document.querySelector("#rows tr.row[data-id='" + CSS.escape(id) + "']");
        return row && row.dataset.terminal !== "true";
      })) {
        listStream = null;
        return;
      }
      await new Promise(function (done) { setTimeout(done, 1000); });
      if (listStream !== ctl) return;
      if (!got) {
        listStream = null;
        loadList().catch(function () {});
        return;
      }
    }
  }

  async function loadOverview() {
    document.getElementById("overview").innerHTML = await fragment("/ui/fragments/overview");
    loaded("overview");
  }

  async function bulk(kind) {
    const f = filters();
    // The bulk body takes every list filter of the form (the same names).
    const body = Object.assign({}, f);
    const extra = Object.keys(f).filter(function (k) { return k !== "task_name" && k !== "status"; });
    const what = (f.status ? f.status + " " : "") + "executions" + (f.task_name ? " of " + f.task_name : "") +
      (extra.length ? " (filtered by " + extra.join(", ") + ")" : "");
    const ok = await confirmAction(
      (kind === "cancel" ? "Cancel" : "Retry") + " every " + what + " matching this filter?",
      kind === "cancel");
    if (!ok) return;
    if (kind === "cancel" && ok.reason) body.reason = ok.reason;
    const key = "ui-bulk-" + Date.now() + "-" + Math.random().toString(36).slice(2);
    const total = { matched: 0, changed: 0, other: 0 };
    let next = null;
    say((kind === "cancel" ? "Cancelling" : "Retrying") + "…", "info");
    do {
      const b = Object.assign({ max_items: 100 }, body);
      if (next) b.cursor = next;
      const r = kind === "cancel"
        ? await call("POST", "/v1/executions:cancel", b)
        : await call("POST", "/v1/executions:retry", b, { "Idempotency-Key": key });
      total.matched += r.matched;
      if (kind === "cancel") {
        total.changed += r.cancelled + r.cancel_requested;
        total.other += r.unchanged;
      } else {
        total.changed += r.retried;
        total.other += r.skipped + r.conflicts;
      }
      next = r.next_cursor;
      say((kind === "cancel" ? "Cancelling" : "Retrying") + ": " + total.matched + " handled so far…", "info");
    } while (next);
    const verb = kind === "cancel" ? "cancelled" : "retried";
    say("Bulk " + kind + " done: " + total.matched + " matched, " + total.changed + " " + verb +
      ", " + total.other + " unchanged.", "ok");
    cursor = null;
    await Promise.all([loadList(), loadOverview()]);
  }

  // Listeners of the list page, installed once.
  function listSetup() {
    const form = document.getElementById("filters");
    const params = new URLSearchParams(location.search);
    params.forEach(function (v, k) { if (form.elements[k]) form.elements[k].value = v; });
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      cursor = null;
      loadList().catch(function (e) { say(e.message, "error"); });
    });
    document.getElementById("list").addEventListener("click", function (ev) {
      const t = ev.target;
      if (t.dataset.cursor) {
        ev.preventDefault();
        cursor = t.dataset.cursor;
        loadList().catch(function (e) { say(e.message, "error"); });
      }
    });
    const bc = document.getElementById("bulk-cancel");
    const br = document.getElementById("bulk-retry");
    bc.onclick = function () { bulk("cancel").catch(function (e) { say(e.message, "error"); }); };
    br.onclick = function () { bulk("retry").catch(function (e) { say(e.message, "error"); }); };
  }

  // ---------- detail page
  // An attempt's stored log tail, fetched when its <details> opens (and again on each refresh
  // while it stays open).
  async function loadLogs(id, details) {
    const body = details.querySelector(".log-body");
    body.innerHTML = await fragment("/ui/fragments/executions/" + encodeURIComponent(id) +
      "/attempts/" + encodeURIComponent(details.dataset.attempt) + "/logs");
  }

  // A live execution's page follows its event stream (GET /v1/executions/{id}/events, read with
  // fetch so that the token stays in the header) and re-reads the fragment after events, at most
  // every 250 ms; when the stream cannot be opened (or ends before the execution does) the page
  // re-reads every 1.5 s and tries the stream again (docs/ui.md#detail).
  let stream = null;
  async function follow(id) {
    const ctl = new AbortController();
    stream = ctl;
    let pending = null;
    const refresh = function () {
      if (pending) return;
      pending = setTimeout(function () {
        pending = null;
        if (stream === ctl) loadDetail(id, true).catch(function () {});
      }, 250);
    };
    let ok = false;
    try {
      const r = await fetch("/v1/executions/" + encodeURIComponent(id) + "/events",
        { headers: headers({ "Accept": "text/event-stream" }), signal: ctl.signal });
      if (r.ok && r.body) {
        const reader = r.body.getReader();
        for (;;) {
          const part = await reader.read();
          if (part.done) break;
          refresh();
        }
        ok = true;
      }
    } catch (_) {
      ok = false;
    }
    if (stream !== ctl) return;
    stream = null;
    clearTimeout(pending);
    const shown = document.getElementById("execution");
    if (ok && shown && shown.dataset.terminal === "true") return;
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(function () { loadDetail(id, true).catch(function () {}); },
      ok ? 0 : 1500);
  }

  // The refresh of a live execution asks for the fragment without the payload and metadata
  // (they do not change) and keeps the ones already shown (docs/ui.md#detail).
  async function loadDetail(id, refresh) {
    const box = document.getElementById("detail");
    const open = Array.from(box.querySelectorAll("details[id]"))
      .filter(function (d) { return d.open; }).map(function (d) { return d.id; });
    const kept = refresh ? document.getElementById("values") : null;
    box.innerHTML = await fragment("/ui/fragments/executions/" + encodeURIComponent(id) +
      (kept ? "?values=false" : ""));
    const slot = document.getElementById("values");
    if (kept && slot && slot.dataset.kept === "true") slot.replaceWith(kept);
    loaded("detail");
    open.forEach(function (name) {
      const d = document.getElementById(name);
      if (d) d.open = true;
    });
    const d = document.getElementById("execution");
    clearTimeout(refreshTimer);
    // A terminal execution's stream sends `end` and closes by itself.
    if (d && d.dataset.terminal !== "true" && !stream) follow(id);
  }

  // The whole stored value as a JSON file: fetched with the token in the header (never in a
  // URL), saved through an object URL (docs/ui.md#values).
  async function download(id, name) {
    const r = await fetch("/ui/fragments/executions/" + encodeURIComponent(id) + "/values/" +
      encodeURIComponent(name), { headers: headers() });
    if (!r.ok) throw new Error("download failed: HTTP " + r.status);
    const url = URL.createObjectURL(await r.blob());
    const a = document.createElement("a");
    a.href = url;
    a.download = id + "-" + name + ".json";
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 10000);
  }

  // Listeners of the detail page, installed once.
  function detailSetup(id) {
    const retryKey = "ui-retry-" + id + "-" + Math.random().toString(36).slice(2);
    // "toggle" does not bubble: listen in the capture phase.
    document.getElementById("detail").addEventListener("toggle", function (ev) {
      const t = ev.target;
      if (t.classList && t.classList.contains("logs") && t.open) {
        loadLogs(id, t).catch(function (e) { say(e.message, "error"); });
      }
    }, true);
    document.getElementById("detail").addEventListener("click", function (ev) {
      const value = ev.target.dataset.download;
      if (value) {
        ev.preventDefault();
        download(id, value).catch(function (e) { say(e.message, "error"); });
        return;
      }
      const action = ev.target.dataset.action;
      if (!action) return;
      ev.preventDefault();
      (async function () {
        if (action === "cancel") {
          const ok = await confirmAction("Cancel execution " + id + "?", true);
          if (!ok) return;
          const e = await call("POST", "/v1/executions/" + id + "/cancel", { reason: ok.reason });
          say("Cancel requested: the execution is now " + e.status + ".", "ok");
        } else if (action === "retry") {
          const ok = await confirmAction("Retry execution " + id + " as a new execution?", false);
          if (!ok) return;
          const e = await call("POST", "/v1/executions/" + id + "/retry", undefined,
            { "Idempotency-Key": retryKey });
          flash.innerHTML = "";
          flash.append("Retried as ");
          const a = document.createElement("a");
          a.href = "/ui/executions/" + e.id;
          a.id = "retried-link";
          a.textContent = e.id;
          flash.append(a);
          flash.className = "flash ok";
          flash.hidden = false;
        } else if (action === "redeliver") {
          const ok = await confirmAction("Deliver the completion webhook of " + id + " again?", false);
          if (!ok) return;
          await call("POST", "/v1/executions/" + id + "/deliveries:redeliver");
          say("Redelivery scheduled.", "ok");
        }
        await loadDetail(id);
      })().catch(function (e) { say(e.message, "error"); });
    });
  }

  // ---------- deployments page (docs/ui.md#deployments): read-only; changes go through the
  // API or `onestep deployments`.
  async function loadDeployments() {
    document.getElementById("deployments").innerHTML =
      await fragment("/ui/fragments/deployments");
  }

  // ---------- start
  let setUp = false;
  async function start() {
    const page = app.dataset.page;
    if (!setUp) {
      setUp = true;
      if (page === "detail") detailSetup(app.dataset.id);
      else if (page !== "deployments") listSetup();
    }
    // The page's content is fetched alongside whoami, not after it (one round trip less,
    // docs/ui.md#page-load-times); it stays hidden until whoami accepts the token.
    const content = page === "detail"
      ? loadDetail(app.dataset.id)
      : page === "deployments"
        ? loadDeployments()
        : Promise.all([loadOverview(), loadList()]);
    content.catch(function (e) { if (e.message !== "unauthorized") say(e.message, "error"); });
    let r;
    try {
      r = await fetch("/v1/whoami", { headers: headers() });
    } catch (e) {
      say("The server cannot be reached: " + e.message, "error");
      return;
    }
    if (r.status === 401) {
      sessionStorage.removeItem(KEY);
      showLogin(sessionStorage.getItem("onestep.tried") ? "That token is not valid here." : "");
      return;
    }
    me = await r.json();
    login.hidden = true;
    app.hidden = false;
    document.getElementById("who").textContent = me.namespace + " · role " + me.role;
    document.getElementById("logout").hidden = !sessionStorage.getItem(KEY);
    if (page === "list") {
      document.getElementById("bulk-cancel").hidden = !me.can_operate;
      document.getElementById("bulk-retry").hidden = !me.can_operate;
    }
  }

  document.getElementById("login-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    const t = document.getElementById("token").value.trim();
    document.getElementById("token").value = "";
    if (!t) return;
    sessionStorage.setItem(KEY, t);
    sessionStorage.setItem("onestep.tried", "1");
    start();
  });
  document.getElementById("logout").addEventListener("click", function () {
    sessionStorage.removeItem(KEY);
    location.reload();
  });
  start();
})();
