// Live charts of one run. The database is the source of truth: the page loads every stored point
// over HTTP (metrics.json?after=<seq>), then extends its traces from websocket notices. A notice
// whose seq is not the next one, a reconnect, or a quiet socket while the run is active all lead
// back to HTTP from the last seq seen, so a dropped notice or a restarted Redis never loses a point.
(function () {
  "use strict";

  const live = JSON.parse(document.getElementById("run-data").textContent);
  const ACTIVE = new Set(["queued", "running", "cancelling"]);
  const QUIET_MS = 10000; // an active run with no notice for this long is checked over HTTP

  // Chart families in display order: [key prefix, title]. Keys are "<family>/<series>" or "<family>".
  const FAMILIES = [
    ["reward", "Reward (mean and each component)"],
    ["eval/reward", "Evaluation reward"],
    ["format_penalty", "Format penalty per module"],
    ["parse_ok", "Parsed outputs per module (share)"],
    ["group_var", "Group reward variance per module"],
    ["zero_var_share", "Zero-variance groups (share)"],
    ["similarity", "Intra-group similarity per module (token F1)"],
    ["adv_resolution", "Advantage resolution (distinct advantages / distinct reward vectors)"],
    ["loss", "Policy loss"],
    ["kl", "KL to the reference model"],
    ["clip_fraction", "Clipped ratio fraction"],
    ["grad_norm", "Gradient norm (before clipping)"],
    ["lr", "Learning rate"],
    ["tokens_per_s", "Training throughput (tokens/s)"],
    ["failure_rate", "Failed trajectories (share)"],
    ["completion_tokens", "Completion tokens per step"],
    ["truncated", "Truncated completions"],
    ["groups", "Groups per step"],
    ["time", "Step time (s)"],
  ];

  const state = {
    lastSeq: 0,
    attempt: live.attempt,
    runState: live.state,
    charts: new Map(), // family -> {div, traces: Map(series -> index)}
    socket: null,
    retryMs: 1000,
    fetching: null,
    lastNoticeAt: Date.now(),
    closedForGood: false,
  };
  window.cohortRun = state; // read by the browser tests and handy in the console

  function seriesOf(key) {
    if (key.startsWith("eval/")) {
      const rest = key.slice("eval/reward/".length);
      return key.startsWith("eval/reward/") ? ["eval/reward", rest] : ["eval", key.slice(5)];
    }
    if (key.startsWith("clip_fraction")) {
      return ["clip_fraction", key === "clip_fraction" ? "all" : key.slice("clip_fraction_".length)];
    }
    const slash = key.indexOf("/");
    if (slash < 0) return [key, key === "zero_var_share" ? "all" : key];
    return [key.slice(0, slash), key.slice(slash + 1)];
  }

  function titleOf(family) {
    const known = FAMILIES.find(([prefix]) => prefix === family);
    return known ? known[1] : family;
  }

  function chartFor(family) {
    let chart = state.charts.get(family);
    if (chart) return chart;
    document.getElementById("no-points")?.remove();
    const container = document.getElementById("charts");
    const div = document.createElement("div");
    div.className = "chart";
    div.id = "chart-" + family.replace(/[^a-z0-9_]/gi, "-");
    div.dataset.family = family;
    div.dataset.points = "0";
    // Keep the display order of FAMILIES whatever order the keys arrive in.
    const rank = (f) => { const i = FAMILIES.findIndex(([p]) => p === f); return i < 0 ? FAMILIES.length : i; };
    const after = [...container.children].find((el) => rank(el.dataset.family) > rank(family));
    container.insertBefore(div, after || null);
    Plotly.newPlot(div, [], {
      title: { text: titleOf(family), font: { size: 13 } },
      margin: { l: 50, r: 10, t: 36, b: 36 }, height: 260,
      xaxis: { title: { text: "step" } }, legend: { orientation: "h", y: -0.25 },
      showlegend: true, uirevision: "keep",
    }, { responsive: true, displaylogo: false });
    chart = { div, traces: new Map() };
    state.charts.set(family, chart);
    return chart;
  }

  // Adds the points (oldest first) to their traces: one extendTraces call per chart.
  function plot(points) {
    const byChart = new Map();
    for (const point of points) {
      for (const [key, value] of Object.entries(point.metrics)) {
        const [family, series] = seriesOf(key);
        if (!byChart.has(family)) byChart.set(family, new Map());
        const perSeries = byChart.get(family);
        if (!perSeries.has(series)) perSeries.set(series, { x: [], y: [] });
        perSeries.get(series).x.push(point.step);
        perSeries.get(series).y.push(value); // null (NaN at the source) draws a gap
      }
    }
    for (const [family, perSeries] of byChart) {
      const chart = chartFor(family);
      const fresh = [...perSeries.keys()].filter((s) => !chart.traces.has(s));
      if (fresh.length) {
        Plotly.addTraces(chart.div, fresh.map((s) => ({ type: "scatter", mode: "lines+markers", name: s, x: [], y: [],
                                                        marker: { size: 4 }, connectgaps: false })));
        fresh.forEach((s) => chart.traces.set(s, chart.traces.size));
      }
      const indices = [], xs = [], ys = [];
      for (const [series, data] of perSeries) {
        indices.push(chart.traces.get(series)); xs.push(data.x); ys.push(data.y);
      }
      Plotly.extendTraces(chart.div, { x: xs, y: ys }, indices);
      chart.div.dataset.points = String(Math.max(...chart.div.data.map((t) => t.x.length)));
    }
  }

  function reset() {
    for (const chart of state.charts.values()) { Plotly.purge(chart.div); chart.div.remove(); }
    state.charts.clear();
    state.lastSeq = 0;
  }

  function accept(points) {
    if (!points.length) return;
    // A resumed run re-does the steps after its checkpoint; those rows were replaced: redraw all.
    if (points.some((p) => p.attempt > state.attempt)) {
      state.attempt = Math.max(...points.map((p) => p.attempt));
      reset();
      refetch();
      return;
    }
    plot(points);
    state.lastSeq = points[points.length - 1].seq;
    const step = points[points.length - 1].step;
    document.getElementById("run-step").textContent = step;
  }

  // Loads every stored point after the last seq seen; concurrent callers share one request chain.
  function refetch() {
    if (state.fetching) return state.fetching;
    state.fetching = (async () => {
      try {
        for (;;) {
          const response = await fetch(`${live.metrics_url}?after=${state.lastSeq}`, { credentials: "same-origin" });
          if (!response.ok) { say(`Could not load metrics (HTTP ${response.status}); retrying.`); return false; }
          const page = await response.json();
          const before = state.lastSeq;
          accept(page.points.filter((p) => p.seq > state.lastSeq));
          showState(page.state, page.current_step);
          if (page.complete) return state.lastSeq > before;
        }
      } catch (err) {
        say("Could not load metrics; retrying.");
        return false;
      } finally {
        state.fetching = null;
      }
    })();
    return state.fetching;
  }

  function showState(runState, currentStep) {
    state.runState = runState;
    const badge = document.getElementById("run-state");
    badge.textContent = runState;
    badge.className = "state state-" + runState;
    document.getElementById("cancel-form").hidden = !["queued", "running", "interrupted"].includes(runState);
    document.getElementById("resume-form").hidden = !["interrupted", "failed"].includes(runState);
    if (currentStep !== undefined && currentStep !== null) document.getElementById("run-step").textContent = currentStep;
  }

  function say(text) { document.getElementById("live-status").textContent = text; }

  function onNotice(notice) {
    state.lastNoticeAt = Date.now();
    if (notice.type === "step") {
      if (notice.seq <= state.lastSeq) return; // already drawn (a refetch got there first)
      if (notice.seq === state.lastSeq + 1 && !state.fetching) accept([notice]);
      else refetch(); // a gap: notices were dropped
    } else if (notice.type === "status") {
      showState(notice.state, notice.current_step);
      document.getElementById("run-error").textContent = notice.error || "";
      refetch(); // the final steps may have been shipped after the last notice we saw
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + live.socket_path);
    state.socket = socket;
    socket.onopen = () => { state.retryMs = 1000; say("Live."); refetch(); };
    socket.onmessage = (event) => onNotice(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (state.socket !== socket) return;
      if (event.code === 4401) { say("Your session ended: log in again to keep watching."); state.closedForGood = true; return; }
      if (event.code === 4404) { say("This run is not visible to you."); state.closedForGood = true; return; }
      say(`Connection lost; reconnecting in ${Math.round(state.retryMs / 1000)} s.`);
      setTimeout(connect, state.retryMs);
      state.retryMs = Math.min(state.retryMs * 2, 15000);
    };
  }

  // A socket can stay open while its notices stop (e.g. Redis restarted and forgot the group):
  // an active run that has been quiet is checked over HTTP, and if points were missed the socket
  // is reopened, which joins the group again.
  setInterval(async () => {
    if (state.closedForGood || !ACTIVE.has(state.runState) || Date.now() - state.lastNoticeAt < QUIET_MS) return;
    state.lastNoticeAt = Date.now();
    const missed = await refetch();
    if (missed && state.socket && state.socket.readyState === WebSocket.OPEN) state.socket.close();
  }, 2000);

  window.addEventListener("DOMContentLoaded", () => { refetch(); connect(); });
})();
