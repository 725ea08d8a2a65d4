// Live charts of one run. The database is the source of truth: the page loads every stored series
// over HTTP (metrics.json?max_points=N: a long series comes downsampled on the server, spikes and
// both ends kept), then extends its traces from websocket notices. A notice whose seq is not the
// next one, a reconnect, or a quiet socket while the run is active all lead back to HTTP from the
// last seq seen (metrics.json?after=<seq>), so a dropped notice or a restarted Redis never loses a
// point. Zooming a chart re-queries the visible step range at full resolution (series=...&from_step=
// &to_step=); clicking a point opens that step's inspector. Drawing (smoothing, log y, the x axis,
// hover sync, legend memory, full width) is chart-controls.js's (window.cohortCharts), where a chart
// sits (sections, pins, small flat charts) and the heatmaps run-sections.js's; this file keeps the
// data coming, and a step -> (wall time, tokens seen) table for the other x axes.
(function () {
  "use strict";

  const live = JSON.parse(document.getElementById("run-data").textContent);
  const ACTIVE = new Set(["queued", "running", "cancelling"]);
  const QUIET_MS = 10000; // an active run with no notice for this long is checked over HTTP
  const MAX_POINTS = live.max_points || 2000; // points per trace the server sends at most
  const GL_ABOVE = 1000; // series longer than this are drawn with WebGL (scattergl)
  const HEATMAP_EVERY_MS = 15000;
  const cc = window.cohortCharts;
  const sections = window.cohortSections; // run-sections.js: where each chart sits, folding, pins, heatmaps

  // Chart families in display order: [key prefix, title, section]. Keys are "<family>/<series>" or
  // "<family>"; sections are the page's folding groups (webapp/runs/views.py CHART_SECTIONS).
  const FAMILIES = [
    ["reward", "Reward (mean and each component)", "learning"],
    ["eval/reward", "Evaluation reward", "learning"],
    ["eval", "Evaluation", "learning"],
    ["format_penalty", "Format penalty per module", "learning"],
    ["parse_ok", "Parsed outputs per module (share)", "learning"],
    ["group_var", "Group reward variance per module", "groups"],
    ["zero_var_share", "Zero-variance groups (share)", "groups"],
    ["similarity", "Intra-group similarity per module (token F1)", "groups"],
    ["adv_resolution", "Advantage resolution (distinct advantages / distinct reward vectors)", "groups"],
    ["groups", "Groups per step", "groups"],
    ["loss", "Policy loss", "optimization"],
    ["kl", "KL to the reference model", "optimization"],
    ["clip_fraction", "Clipped ratio fraction", "optimization"],
    ["grad_norm", "Gradient norm (before clipping)", "optimization"],
    ["lr", "Learning rate", "optimization"],
    ["mismatch", "Sampler / trainer mismatch (per token: |log-prob difference|, KL)", "optimization"],
    ["is_weight", "Importance-sampling weight (mean, share truncated at the cap)", "optimization"],
    ["optimizer_steps", "Optimizer steps per training step (micro-batch accumulation, PPO epochs)", "optimization"],
    ["completion_tokens", "Completion tokens per step", "sampling"],
    ["truncated", "Truncated completions", "sampling"],
    ["failure_rate", "Failed trajectories (share)", "sampling"],
    ["error_rate", "Rollouts that raised (share)", "sampling"],
    ["tokens_per_s", "Training throughput (tokens/s)", "sampling"],
    ["time", "Step time (s)", "sampling"],
    ["system/memory", "GPU memory (GiB): allocated, reserved, peak in the step", "system"],
    ["system/gpu_util", "GPU utilisation (%)", "system"],
    ["system/gpu_power_w", "GPU power (W)", "system"],
    ["system/rss_gb", "Process memory (RSS, GiB)", "system"],
    ["system/time", "Sampling vs update time per step (s)", "system"],
    ["system/ranks", "Sampling and update time per process (s): the slowest holds up the step", "system"],
  ];
  const SYSTEM_FAMILY = { gpu_mem_allocated_gb: "system/memory", gpu_mem_reserved_gb: "system/memory",
                          gpu_mem_peak_gb: "system/memory", sample_s: "system/time", update_s: "system/time" };

  const state = {
    lastSeq: 0,
    attempt: live.attempt,
    runState: live.state,
    charts: new Map(), // family -> {div, keys: Map(series -> metric key), downsampled, zoomed}
    socket: null,
    retryMs: 1000,
    fetching: null,
    lastNoticeAt: Date.now(),
    closedForGood: false,
    heatmapAt: 0,
    axes: new Map(), // step -> {t: seconds since the first stored step, tokens: completion tokens seen}
    clock: null, // {t, at}: the server's seconds-since-first-step at a local time, for live points
  };
  window.cohortRun = state; // read by the browser tests and handy in the console

  function seriesOf(key) {
    if (key.startsWith("system/")) {
      const name = key.slice("system/".length);
      const rank = /^rank(\d+)\/(sample|update)_s$/.exec(name); // a many-process run (num_processes)
      if (rank) return ["system/ranks", `rank ${rank[1]} ${rank[2] === "sample" ? "sampling" : "update"}`];
      return [SYSTEM_FAMILY[name] || key, name];
    }
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

  function familyInfo(family) {
    const known = FAMILIES.find(([prefix]) => prefix === family);
    if (known) return { title: known[1], section: known[2], rank: FAMILIES.indexOf(known) };
    return { title: family, section: family.startsWith("system/") ? "system" : "other", rank: FAMILIES.length };
  }

  function chartFor(family) {
    let chart = state.charts.get(family);
    if (chart) return chart;
    document.getElementById("no-points")?.remove();
    const div = document.createElement("div");
    div.className = "chart";
    div.id = "chart-" + family.replace(/[^a-z0-9_]/gi, "-");
    div.dataset.family = family;
    div.dataset.section = familyInfo(family).section;
    div.dataset.points = "0";
    document.getElementById(`charts-${div.dataset.section}`).appendChild(div);
    chart = { div, keys: new Map(), downsampled: false, zoomed: false, zoomSeq: 0 };
    state.charts.set(family, chart);
    cc.register(div, {
      title: familyInfo(family).title, family, onClick: (step) => openStep(step), compactZero: true,
      onShape: () => sections.place(div), pinned: sections.isPinned(family), onPin: (pinned) => sections.pin(div, pinned),
    });
    sections.place(div);
    div.on("plotly_relayout", (event) => onRelayout(chart, event));
    return chart;
  }

  function openStep(step) {
    if (step === undefined || step === null || !Number.isFinite(Number(step))) return;
    location.href = live.step_url.replace("/steps/0/", `/steps/${Math.round(Number(step))}/`);
  }

  function markPoints(chart) {
    chart.div.dataset.downsampled = String(chart.downsampled);
    chart.div.dataset.webgl = String(chart.div.data.some((t) => t.type === "scattergl"));
  }

  // The step -> (t, tokens) table: exact rows from the server (`axes` of a metrics.json answer),
  // and the server's clock, so a point that arrives over the websocket gets its time too.
  function absorbAxes(axes) {
    if (!axes) return;
    axes.step.forEach((step, i) => {
      state.axes.set(step, { t: axes.t[i], tokens: axes.tokens ? axes.tokens[i] : null });
    });
    if (axes.now_t !== null && axes.now_t !== undefined) state.clock = { t: axes.now_t, at: Date.now() };
    if (axes.tokens && axes.tokens.some((v) => v !== null)) state.hasTokens = true;
  }

  // A live point: its time is now on the server's clock (it was stored a moment ago), its tokens
  // seen those of the newest known step plus its own completion tokens.
  function estimateAxes(point) {
    if (state.axes.has(point.step)) return;
    let newest = null;
    for (const [step, row] of state.axes) if (step < point.step && (!newest || step > newest[0])) newest = [step, row];
    const own = point.metrics.completion_tokens;
    const tokens = typeof own === "number" ? (newest && newest[1].tokens !== null ? newest[1].tokens : 0) + own : null;
    const t = state.clock ? state.clock.t + (Date.now() - state.clock.at) / 1000 : null;
    state.axes.set(point.step, { t, tokens });
    if (tokens !== null) state.hasTokens = true;
  }

  // Draws a metrics.json series page: new traces are added, known ones replaced.
  function drawSeries(seriesByKey) {
    const byChart = new Map();
    for (const [key, payload] of Object.entries(seriesByKey)) {
      const [family, series] = seriesOf(key);
      if (!byChart.has(family)) byChart.set(family, []);
      byChart.get(family).push([key, series, payload]);
    }
    for (const [family, entries] of byChart) {
      const chart = chartFor(family);
      for (const [key, series, p] of entries) {
        chart.keys.set(series, key);
        // WebGL for long series: SVG slows down past a few thousand points.
        cc.setSeries(chart.div, series, { key, steps: p.x, y: p.y, long: p.total > GL_ABOVE });
      }
      cc.draw(chart.div);
      chart.downsampled = entries.some(([, , p]) => p.downsampled) ||
        (chart.downsampled && entries.length < chart.keys.size);
      markPoints(chart);
    }
  }

  // Zoom: fetch the visible range at full resolution (or downsampled to MAX_POINTS if still longer);
  // back to the overview on autorange. Only charts that were downsampled need it.
  async function onRelayout(chart, event) {
    const lo = event["xaxis.range[0]"] ?? (event["xaxis.range"] || [])[0];
    const hi = event["xaxis.range[1]"] ?? (event["xaxis.range"] || [])[1];
    const reset = event["xaxis.autorange"] === true;
    if (!(reset && chart.zoomed) && !(lo !== undefined && hi !== undefined && (chart.downsampled || chart.zoomed))) return;
    const keys = [...chart.keys.values()];
    const params = new URLSearchParams({ series: keys.join(","), max_points: String(MAX_POINTS) });
    if (!reset) {
      const steps = cc.stepRange(chart.div, Number(lo), Number(hi)); // the range in the x axis' own units
      if (!steps) return;
      params.set("from_step", String(Math.max(0, Math.floor(steps[0]))));
      params.set("to_step", String(Math.max(0, Math.ceil(steps[1]))));
    }
    const ticket = ++chart.zoomSeq; // a later zoom wins over an answer still on its way
    chart.div.dataset.resolution = "loading";
    try {
      const response = await fetch(`${live.metrics_url}?${params}`, { credentials: "same-origin" });
      if (!response.ok || ticket !== chart.zoomSeq) return;
      const page = await response.json();
      if (ticket !== chart.zoomSeq) return;
      absorbAxes(page.axes);
      drawSeries(page.series);
      chart.zoomed = !reset;
      chart.div.dataset.resolution = Object.values(page.series).some((p) => p.downsampled) ? "downsampled" : "full";
    } catch (err) {
      say("Could not load the zoomed range.");
    }
  }

  // Adds the points (oldest first) to their traces: one extendTraces call per chart.
  function plot(points) {
    const byChart = new Map();
    for (const point of points) {
      estimateAxes(point);
      for (const [key, value] of Object.entries(point.metrics)) {
        const [family, series] = seriesOf(key);
        if (!byChart.has(family)) byChart.set(family, {});
        const perSeries = byChart.get(family);
        if (!perSeries[series]) perSeries[series] = { key, steps: [], y: [] };
        perSeries[series].steps.push(point.step);
        perSeries[series].y.push(value); // null (NaN at the source) draws a gap
      }
    }
    for (const [family, perSeries] of byChart) {
      const chart = chartFor(family);
      for (const [series, data] of Object.entries(perSeries)) chart.keys.set(series, data.key);
      cc.append(chart.div, perSeries);
      markPoints(chart);
    }
  }

  function reset() {
    for (const chart of state.charts.values()) { cc.unregister(chart.div); Plotly.purge(chart.div); chart.div.remove(); }
    state.charts.clear();
    state.axes.clear();
    sections.show();
    state.lastSeq = 0;
    state.heatmapAt = 0;
  }

  function accept(points) {
    if (!points.length) return;
    // A resumed run re-does the steps after its checkpoint; those rows were replaced: redraw all.
    if (points.some((p) => p.attempt > state.attempt)) {
      state.attempt = Math.max(...points.map((p) => p.attempt));
      reset();
      loadOverview().then(refetch);
      return;
    }
    plot(points);
    state.lastSeq = points[points.length - 1].seq;
    const step = points[points.length - 1].step;
    document.getElementById("run-step").textContent = step;
    showBest(Math.max(...points.map((p) => p.metrics["reward/mean"] ?? -Infinity)));
    if (Date.now() - state.heatmapAt > HEATMAP_EVERY_MS) loadHeatmaps();
  }

  // The first load: every series, downsampled on the server when longer than MAX_POINTS.
  async function loadOverview() {
    try {
      const response = await fetch(`${live.metrics_url}?max_points=${MAX_POINTS}`, { credentials: "same-origin" });
      if (!response.ok) { say(`Could not load metrics (HTTP ${response.status}); retrying.`); return; }
      const page = await response.json();
      absorbAxes(page.axes);
      if (page.last_seq > state.lastSeq) {
        state.attempt = Math.max(state.attempt, page.attempt);
        drawSeries(page.series);
        state.lastSeq = page.last_seq;
      }
      showState(page.state, page.current_step);
      showBest(page.best_reward);
    } catch (err) {
      say("Could not load metrics; retrying.");
    }
  }

  function loadHeatmaps() {
    state.heatmapAt = Date.now();
    return sections.loadHeatmaps(live.heatmap_url, openStep);
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
          absorbAxes(page.axes);
          accept(page.points.filter((p) => p.seq > state.lastSeq));
          showState(page.state, page.current_step);
          showBest(page.best_reward);
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
    // "Run N is queued." was true when the page loaded; once the run moved on it would mislead.
    if (runState !== "queued") document.querySelectorAll(".messages li.run-queued").forEach((li) => li.remove());
  }

  // The summary's best reward (the best step mean so far), raised as better steps arrive.
  function showBest(value) {
    if (typeof value !== "number" || !Number.isFinite(value)) return;
    const cell = document.getElementById("run-best");
    const shown = Number.parseFloat(cell.dataset.value ?? cell.textContent);
    if (Number.isFinite(shown) && shown >= value) return;
    cell.dataset.value = String(value);
    cell.textContent = value.toFixed(3);
  }

  function say(text) { document.getElementById("live-status").textContent = text; }

  // The topbar's count of the viewer's unseen open alerts (templates/base.html), as the server counted it.
  function showAlertBadge(count) {
    const link = document.getElementById("alerts-link");
    if (!link) return;
    let badge = document.getElementById("alert-badge");
    if (!count) { badge?.remove(); return; }
    if (!badge) {
      badge = document.createElement("span");
      badge.id = "alert-badge";
      badge.className = "badge bad alert-badge";
      badge.title = "unseen open alerts";
      link.append(" ", badge);
    }
    badge.textContent = String(count);
  }

  // A fired alert, as a new first row of the run's alerts panel (templates/alerts/run_panel.html).
  function showAlert(notice) {
    const panel = document.getElementById("alerts");
    if (!panel || document.querySelector(`#run-alerts tr[data-alert="${notice.alert}"]`)) return;
    let table = document.getElementById("run-alerts");
    if (!table) {
      table = document.createElement("table");
      table.id = "run-alerts";
      table.className = "table compact";
      const head = table.createTHead().insertRow();
      for (const title of ["Fired", "Kind", "Step", "Message", "Status"]) {
        const th = document.createElement("th");
        th.textContent = title;
        head.append(th);
      }
      table.createTBody();
      const empty = document.getElementById("no-alerts");
      if (empty) empty.replaceWith(table); else panel.querySelector("h2").after(table);
    }
    const row = table.tBodies[0].insertRow(0);
    row.className = `alert-row alert-${notice.kind} open live-new`;
    row.dataset.alert = String(notice.alert);
    const kind = document.createElement("span");
    kind.className = "badge alert-kind bad";
    kind.textContent = notice.kind_label;
    const cells = [notice.fired_at_text, kind, notice.step ?? "—", notice.message, "open"];
    for (const value of cells) {
      const cell = row.insertCell();
      if (value instanceof Node) cell.append(value); else cell.textContent = String(value);
    }
  }

  function onNotice(notice) {
    state.lastNoticeAt = Date.now();
    if (notice.type === "step") {
      if (notice.seq <= state.lastSeq) return; // already drawn (a refetch got there first)
      if (notice.seq === state.lastSeq + 1 && !state.fetching) accept([notice]);
      else refetch(); // a gap: notices were dropped
    } else if (notice.type === "status") {
      showState(notice.state, notice.current_step);
      document.getElementById("run-error").textContent = notice.error || "";
      refetch().then(loadHeatmaps); // the final steps may have been shipped after the last notice we saw
    } else if (notice.type === "prompts") {
      window.cohortPromptPhase?.render(notice);
    } else if (notice.type === "alert") {
      showAlert(notice);
      showAlertBadge(notice.badge);
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

  window.addEventListener("DOMContentLoaded", async () => {
    document.getElementById("step-jump")?.addEventListener("submit", (event) => {
      event.preventDefault();
      openStep(parseInt(event.target.step.value, 10) || 1);
    });
    cc.init("run", document.getElementById("chart-toolbar"));
    cc.setLookup((step) => state.axes.get(step), () => !!state.hasTokens);
    sections.setOrder((family) => familyInfo(family).rank);
    await Promise.all([cc.ready, sections.load()]); // the user's stored settings, legend and layout apply to the first draw
    await loadOverview();
    loadHeatmaps();
    refetch();
    connect();
  });
})();
