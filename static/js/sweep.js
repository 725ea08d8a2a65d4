// The sweep page. The server sends everything it draws as one payload (webapp/sweeps/page_payload.py): embedded
// in the page for the first draw, then fetched again from data.json whenever the sweep's websocket says
// it changed, and on every (re)connect, since a notice sent while the socket was down is lost. Bursts
// of notices (several trials settling at once) cost at most one fetch in flight and one queued behind
// it. Redrawing is whole: the table is rebuilt and the charts are given to Plotly.react.
(function () {
  "use strict";

  const live = JSON.parse(document.getElementById("sweep-live").textContent);
  const state = {
    payload: JSON.parse(document.getElementById("sweep-data").textContent),
    fetches: 0, // data.json answers drawn (read by the browser tests)
    inFlight: false,
    pending: false,
    socket: null,
    retryMs: 1000,
    closedForGood: false,
  };
  window.cohortSweep = state;

  const CHART = { displaylogo: false, responsive: true };
  const el = (id) => document.getElementById(id);

  function say(text) { el("sweep-status").textContent = text; }

  function fmt(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return String(v);
      const a = Math.abs(v);
      if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2).replace(/\.?0+e/, "e"); // 1e-4, 2.15e-5
      return String(parseFloat(v.toPrecision(4)));
    }
    return String(v);
  }

  function node(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }

  // --- the header: state, waiting, progress, Cancel ---------------------------------------------------
  function drawHeader(p) {
    const s = p.sweep;
    const badge = el("sweep-state");
    badge.textContent = s.state;
    badge.className = `state state-${s.state}`;
    const waiting = el("sweep-waiting");
    waiting.textContent = s.waiting || "";
    waiting.hidden = !s.waiting;
    const c = s.counts;
    const parts = [`${c.complete} complete`, `${c.running} running`];
    if (c.pruned) parts.push(`${c.pruned} pruned`);
    if (c.failed) parts.push(`${c.failed} failed`);
    el("sweep-progress").textContent = `${p.trials.length} of ${s.n_trials} started: ${parts.join(", ")}`;
    const cancel = el("cancel-form");
    if (cancel) cancel.hidden = s.state !== "running";
  }

  // --- the best configuration -------------------------------------------------------------------------
  function drawBest(p) {
    const body = el("best-body");
    body.replaceChildren();
    const best = p.best;
    if (!best) {
      body.append(node("p", { class: "muted", text: "No trial has completed yet." }));
      return;
    }
    body.append(node("p", {}, `Trial ${best.number}: `, node("strong", { id: "best-value", text: fmt(best.value) }),
      ` ${p.sweep.objective} (${p.sweep.direction === "maximize" ? "highest" : "lowest"} of ${p.sweep.counts.complete} complete)`));
    const rows = Object.entries(best.params).map(([k, v]) =>
      node("tr", {}, node("th", {}, node("code", { text: k })), node("td", { "data-param": k, text: fmt(v) })));
    body.append(node("table", { class: "table compact best-params", id: "best-params" }, node("tbody", {}, ...rows)));
    body.append(node("p", {}, node("a", { class: "button primary", id: "launch-best", href: best.launch_url,
      text: "Launch this" }), " ", node("span", { class: "muted small",
      text: "opens the launch form with the sweep's settings and these values; nothing starts until you launch it." })));
  }

  // --- the trials table -------------------------------------------------------------------------------
  function drawTable(p) {
    const best = p.best ? p.best.number : null;
    const rows = p.trials.map((t) => {
      const stateCell = node("td", { class: "trial-state" },
        node("span", { class: `state state-${t.state}`, title: t.reason || null, text: t.state }));
      if (t.reason) stateCell.append(node("div", { class: "reason small muted", text: t.reason }));
      const s = t.seeds;
      const ci = s && s.ci_low !== null ? `[${fmt(s.ci_low)}, ${fmt(s.ci_high)}]` : "—";
      const links = t.runs.map((r) => node("a", { href: r.url, class: `seed-link state-text-${r.state}`,
        title: `run ${r.id}: ${r.state}${r.value !== null ? ` · ${fmt(r.value)}` : ""}`, text: `seed ${r.seed}` }));
      const runsCell = node("td", { class: "trial-runs" });
      links.forEach((a, i) => { if (i) runsCell.append(" "); runsCell.append(a); });
      return node("tr", { "data-number": t.number, class: t.number === best ? "best" : null },
        node("td", { class: "num", text: t.number }),
        ...p.dimensions.map((d) => node("td", { class: "num", "data-param": d.name, text: fmt(t.params[d.name]) })),
        node("td", { class: "num", text: t.runs.length }),
        stateCell,
        node("td", { class: "num trial-value", text: fmt(t.value) }),
        node("td", { class: "num", text: s ? fmt(s.iqm) : "—" }),
        node("td", { class: "num", text: ci }),
        node("td", { class: "num", text: t.steps === null ? "—" : t.steps }),
        runsCell);
    });
    el("trials-table").tBodies[0].replaceChildren(...rows);
  }

  // --- parallel coordinates ---------------------------------------------------------------------------
  function decades(low, high) {
    const ticks = [];
    for (let e = Math.ceil(Math.log10(low)); e <= Math.floor(Math.log10(high)); e++) ticks.push(e);
    return ticks.length >= 2 ? ticks : [Math.log10(low), Math.log10(high)];
  }

  // One axis of the parallel coordinates: values, range and ticks for a swept field.
  function axis(d, trials) {
    const raw = trials.map((t) => t.params[d.name]);
    if (d.categorical) {
      const names = d.values.length ? d.values.map(String) : [...new Set(raw.map(String))];
      const values = raw.map((v) => { const i = names.indexOf(String(v)); return i < 0 ? names.length : i; });
      return { label: d.name, values, tickvals: names.map((_, i) => i), ticktext: names,
        range: [0, Math.max(names.length - 1, 1)] };
    }
    if (d.kind === "values") {
      const sorted = [...d.values].sort((a, b) => a - b);
      return { label: d.name, values: raw, tickvals: sorted, ticktext: sorted.map(fmt),
        range: [sorted[0], sorted[sorted.length - 1] === sorted[0] ? sorted[0] + 1 : sorted[sorted.length - 1]] };
    }
    if (d.log) {
      const ticks = decades(d.low, d.high);
      return { label: `${d.name} (log)`, values: raw.map((v) => Math.log10(v)), tickvals: ticks,
        ticktext: ticks.map((e) => fmt(10 ** e)), range: [Math.log10(d.low), Math.log10(d.high)] };
    }
    return { label: d.name, values: raw, range: [d.low, d.high] };
  }

  function drawParcoords(p) {
    const trials = p.trials.filter((t) => t.value !== null && p.dimensions.every((d) => d.name in t.params));
    el("parcoords-empty").hidden = trials.length > 0;
    const div = el("parcoords-chart");
    div.hidden = trials.length === 0;
    if (!trials.length) return;
    const values = trials.map((t) => t.value);
    const dimensions = p.dimensions.map((d) => axis(d, trials));
    dimensions.push({ label: p.sweep.objective, values });
    Plotly.react(div, [{
      type: "parcoords",
      line: { color: values, colorscale: "Viridis", reversescale: p.sweep.direction === "minimize", showscale: true,
        colorbar: { title: { text: "objective" } } },
      dimensions,
    }], { margin: { l: 70, r: 70, t: 50, b: 30 }, height: 380 }, CHART);
  }

  // --- importance and the objective over trials -----------------------------------------------------
  // The server words the note (webapp/sweeps/importance.py): what is drawn and by which evaluator, or
  // why nothing is yet, and whether this sweep can ever get there.
  function drawImportance(p) {
    const imp = p.importance;
    const div = el("importance-chart");
    el("importance-note").textContent = imp.note;
    if (!imp.ready || !imp.values.length) {
      div.hidden = true;
      return;
    }
    div.hidden = false;
    const ranked = [...imp.values].reverse(); // the largest on top
    Plotly.react(div, [{ type: "bar", orientation: "h", x: ranked.map((v) => v[1]), y: ranked.map((v) => v[0]),
      text: ranked.map((v) => v[1].toFixed(3)), textposition: "auto", hoverinfo: "x+y" }],
    { margin: { l: 140, r: 20, t: 10, b: 40 }, height: Math.max(160, 50 + 36 * ranked.length),
      xaxis: { range: [0, 1], title: { text: `share of the variance the settings explain (${imp.evaluator})` } } },
    CHART);
  }

  function drawObjective(p) {
    const done = p.trials.filter((t) => t.value !== null);
    const better = p.sweep.direction === "maximize" ? (a, b) => a > b : (a, b) => a < b;
    let best = null;
    const running = done.map((t) => { if (best === null || better(t.value, best)) best = t.value; return best; });
    Plotly.react(el("objective-chart"), [
      { type: "scatter", mode: "markers", name: "trial", x: done.map((t) => t.number), y: done.map((t) => t.value),
        text: done.map((t) => Object.entries(t.params).map(([k, v]) => `${k}=${fmt(v)}`).join("<br>")),
        hovertemplate: "trial %{x}: %{y}<br>%{text}<extra></extra>" },
      { type: "scatter", mode: "lines", name: "best so far", line: { shape: "hv" }, x: done.map((t) => t.number), y: running },
    ], { margin: { l: 60, r: 20, t: 10, b: 40 }, height: 300,
      xaxis: { title: { text: "trial" }, dtick: p.trials.length <= 20 ? 1 : undefined },
      yaxis: { title: { text: p.sweep.objective } }, legend: { orientation: "h", y: 1.1 } }, CHART);
  }

  function draw(p) {
    state.payload = p;
    drawHeader(p);
    drawBest(p);
    drawTable(p);
    if (window.Plotly) {
      drawParcoords(p);
      drawImportance(p);
      drawObjective(p);
    }
  }

  // --- keeping up -------------------------------------------------------------------------------------
  // One fetch in flight at most; notices during it ask for exactly one more afterwards.
  async function refresh() {
    if (state.inFlight) { state.pending = true; return; }
    state.inFlight = true;
    try {
      const response = await fetch(live.data_url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.ok) { draw(await response.json()); state.fetches += 1; }
      else say(`Could not reload the sweep (HTTP ${response.status}).`);
    } catch (err) {
      say("Could not reload the sweep; it is retried at the next notice.");
    } finally {
      state.inFlight = false;
      if (state.pending) { state.pending = false; refresh(); }
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + live.socket_path);
    state.socket = socket;
    socket.onopen = () => { state.retryMs = 1000; say(""); refresh(); }; // catch up on what the socket missed
    socket.onmessage = (event) => { if (JSON.parse(event.data).type === "sweep") refresh(); };
    socket.onclose = (event) => {
      if (state.socket !== socket) return;
      if (event.code === 4401) { say("Your session ended: log in again to keep watching."); state.closedForGood = true; return; }
      if (event.code === 4404) { say("This sweep is not visible to you."); state.closedForGood = true; return; }
      say(`Connection lost; reconnecting in ${Math.round(state.retryMs / 1000)} s.`);
      setTimeout(connect, state.retryMs);
      state.retryMs = Math.min(state.retryMs * 2, 15000);
    };
  }

  window.addEventListener("DOMContentLoaded", () => {
    draw(state.payload);
    connect();
  });
})();
