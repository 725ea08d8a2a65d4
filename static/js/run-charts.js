// The run page's charts, fed by run-live.js: which chart each metric key goes to (FAMILIES), a chart
// made on its family's first point, a metrics.json series page drawn or live points appended
// (through chart-controls.js, window.cohortCharts), zooming into a downsampled chart (the visible
// step range re-queried at full resolution: series=...&from_step=&to_step=), a click on a point
// opening that step's inspector, and the step -> (wall time, tokens seen) table for the other x axes.
// Where a chart sits (sections, pins, small flat charts) is run-sections.js's.
(function () {
  "use strict";

  // Series longer than this are drawn as lines without markers. Every chart is SVG: a page of 30
  // WebGL charts lost its oldest (the Reward chart) once the browser's ~16 contexts were used, and
  // the server sends at most MAX_POINTS points a series, which SVG draws well.
  const LINES_ABOVE = 1000;
  const cc = window.cohortCharts;
  const sections = window.cohortSections; // run-sections.js: where each chart sits, folding, pins, heatmaps
  const status = window.cohortRunStatus;

  // Chart families in display order: [key prefix, title, section]. Keys are "<family>/<series>" or
  // "<family>"; sections are the page's folding groups (webapp/runs/views.py CHART_SECTIONS).
  const FAMILIES = [
    ["reward", "Reward (mean and each component)", "learning"],
    ["eval/reward", "Evaluation reward", "learning"],
    ["eval", "Evaluation", "learning"],
    ["format_penalty", "Format penalty per module", "learning"],
    ["parse_ok", "Parsed outputs per module (share)", "learning"],
    ["tokens/entropy", "Token entropy (nats): mean, 10th/50th/90th percentiles, best and worst rollout of each group", "tokens"],
    ["tokens/mismatch", "Tokens whose sampler and trainer log-probs differ by more than 0.1 (share), and the largest gap", "tokens"],
    ["tokens/prob", "Sampled tokens' mean probability", "tokens"],
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
    ["is_weight", "Importance-sampling weight (mean, largest, effective sample share, share truncated at the cap)", "optimization"],
    ["optimizer_steps", "Optimizer steps per training step (micro-batch accumulation, PPO epochs)", "optimization"],
    ["completion_tokens", "Completion tokens per step", "sampling"],
    ["truncated", "Truncated completions", "sampling"],
    ["failure_rate", "Failed trajectories (share)", "sampling"],
    ["error_rate", "Rollouts that raised (share)", "sampling"],
    ["tokens_per_s", "Training throughput (tokens/s)", "sampling"],
    ["time", "Step time (s)", "sampling"],
    ["pipeline/wait", "Share of the step each side waited: the trainer for its batch, the sampler for the update", "pipeline"],
    ["pipeline/staleness", "Staleness of the trained batch (policy versions behind the trainer)", "pipeline"],
    ["pipeline/queue", "Sampled batches waiting to train, and stale batches dropped", "pipeline"],
    ["pipeline/adapter_sync_s", "Handing the adapter to the sampler (s)", "pipeline"],
    ["system/memory", "GPU memory (GiB): allocated, reserved, peak in the step", "system"],
    ["system/gpu_util", "GPU utilisation (%)", "system"],
    ["system/gpu_power_w", "GPU power (W)", "system"],
    ["system/rss_gb", "Process memory (RSS, GiB)", "system"],
    ["system/time", "Sampling vs update time per step (s)", "system"],
    ["system/ranks", "Sampling and update time per process (s): the slowest holds up the step", "system"],
  ];
  // pipeline/<key> -> [family, series] (trainer/run/pipeline.py names the keys).
  const PIPELINE_SERIES = {
    trainer_wait_share: ["pipeline/wait", "trainer"], sampler_wait_share: ["pipeline/wait", "sampler"],
    queue_depth: ["pipeline/queue", "waiting"], dropped_stale: ["pipeline/queue", "dropped (stale)"],
    dropped_in_flight: ["pipeline/queue", "dropped at resume"],
  };
  const SYSTEM_FAMILY = { gpu_mem_allocated_gb: "system/memory", gpu_mem_reserved_gb: "system/memory",
                          gpu_mem_peak_gb: "system/memory", sample_s: "system/time", update_s: "system/time" };

  const state = {
    charts: new Map(), // family -> {div, keys: Map(series -> metric key), downsampled, zoomed}
    axes: new Map(), // step -> {t: seconds since the first stored step, tokens: completion tokens seen}
    clock: null, // {t, at}: the server's seconds-since-first-step at a local time, for live points
    hasTokens: false,
    newestAxes: null, // [step, row] of the newest step in `axes`
  };
  let live = null; // the page's run-data (metrics_url, step_url), from configure()
  let maxPoints = 2000; // points per trace the server sends at most

  function configure(liveData, maxPointsPerTrace) { live = liveData; maxPoints = maxPointsPerTrace; }

  function seriesOf(key) {
    if (key.startsWith("system/")) {
      const name = key.slice("system/".length);
      const rank = /^rank(\d+)\/(sample|update)_s$/.exec(name); // a many-process run (num_processes)
      if (rank) return ["system/ranks", `rank ${rank[1]} ${rank[2] === "sample" ? "sampling" : "update"}`];
      return [SYSTEM_FAMILY[name] || key, name];
    }
    if (key.startsWith("pipeline/")) {
      const name = key.slice("pipeline/".length);
      if (PIPELINE_SERIES[name]) return PIPELINE_SERIES[name];
      const slash = name.indexOf("/"); // pipeline/staleness/mean
      return slash < 0 ? [key, name] : [`pipeline/${name.slice(0, slash)}`, name.slice(slash + 1)];
    }
    if (key.startsWith("eval/")) {
      const rest = key.slice("eval/reward/".length);
      return key.startsWith("eval/reward/") ? ["eval/reward", rest] : ["eval", key.slice(5)];
    }
    if (key.startsWith("tokens/")) {
      // tokens/<family>/<series>[/<module>] (issue 45): "tokens/entropy/p90/rewriter" is "p90 rewriter"
      // on the token-entropy chart.
      const [, family, name, ...module] = key.split("/");
      if (name === undefined) return [key, key];
      return [`tokens/${family}`, module.length ? `${name} ${module.join("/")}` : name];
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
      setAxes(step, { t: axes.t[i], tokens: axes.tokens ? axes.tokens[i] : null });
    });
    if (axes.now_t !== null && axes.now_t !== undefined) state.clock = { t: axes.now_t, at: Date.now() };
    if (axes.tokens && axes.tokens.some((v) => v !== null)) state.hasTokens = true;
  }

  // A live point: its time is now on the server's clock (it was stored a moment ago), its tokens
  // seen those of the newest known step plus its own completion tokens. The newest known step is
  // kept beside the table, so a point costs no walk over every step the page holds.
  function estimateAxes(point) {
    if (state.axes.has(point.step)) return;
    const newest = state.newestAxes && state.newestAxes[0] < point.step ? state.newestAxes : newestBefore(point.step);
    const own = point.metrics.completion_tokens;
    const tokens = typeof own === "number" ? (newest && newest[1].tokens !== null ? newest[1].tokens : 0) + own : null;
    const t = state.clock ? state.clock.t + (Date.now() - state.clock.at) / 1000 : null;
    setAxes(point.step, { t, tokens });
    if (tokens !== null) state.hasTokens = true;
  }

  function newestBefore(step) {
    let newest = null;
    for (const [s, row] of state.axes) if (s < step && (!newest || s > newest[0])) newest = [s, row];
    return newest;
  }

  function setAxes(step, row) {
    state.axes.set(step, row);
    if (!state.newestAxes || step >= state.newestAxes[0]) state.newestAxes = [step, row];
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
        cc.setSeries(chart.div, series, { key, steps: p.x, y: p.y, long: p.total > LINES_ABOVE });
      }
      cc.draw(chart.div);
      chart.downsampled = entries.some(([, , p]) => p.downsampled) ||
        (chart.downsampled && entries.length < chart.keys.size);
      markPoints(chart);
    }
  }

  // Zoom: fetch the visible range at full resolution (or downsampled to maxPoints if still longer);
  // back to the overview on autorange. Only charts that were downsampled need it.
  async function onRelayout(chart, event) {
    const lo = event["xaxis.range[0]"] ?? (event["xaxis.range"] || [])[0];
    const hi = event["xaxis.range[1]"] ?? (event["xaxis.range"] || [])[1];
    const reset = event["xaxis.autorange"] === true;
    if (!(reset && chart.zoomed) && !(lo !== undefined && hi !== undefined && (chart.downsampled || chart.zoomed))) return;
    const keys = [...chart.keys.values()];
    const params = new URLSearchParams({ series: keys.join(","), max_points: String(maxPoints) });
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
      status.say("Could not load the zoomed range.");
    }
  }

  // Adds the points (oldest first) to their charts' models; chart-controls.js draws them (at most once
  // a second, charts in view only). True when a trace has grown past twice the server's thinning.
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
    let outgrown = false;
    for (const [family, perSeries] of byChart) {
      const chart = chartFor(family);
      for (const [series, data] of Object.entries(perSeries)) chart.keys.set(series, data.key);
      cc.append(chart.div, perSeries);
      if (!chart.zoomed && Number(chart.div.dataset.points) > 2 * maxPoints) outgrown = true;
    }
    return outgrown; // a trace twice the server's thinning: the caller loads the overview again
  }

  // Every chart removed and the step table emptied (a resumed run's steps are drawn anew).
  function reset() {
    for (const chart of state.charts.values()) { cc.unregister(chart.div); Plotly.purge(chart.div); chart.div.remove(); }
    state.charts.clear();
    state.axes.clear();
    state.newestAxes = null;
    sections.show();
  }

  window.cohortRunCharts = {
    state, configure, familyInfo, openStep, absorbAxes, drawSeries, plot, reset,
    lookup: (step) => state.axes.get(step),
    hasTokens: () => !!state.hasTokens,
  };
})();
