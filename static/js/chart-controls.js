// Chart controls shared by the run page (run-live.js) and the compare page (compare.js): a toolbar
// (smoothing, log y, x axis by step / wall time / tokens seen), hover synced across the page's
// charts, legend choices remembered per user on the server (prefs.js), a full-width toggle per
// chart, and axis ticks that show small values as themselves.
//
// Each chart keeps its data as a model (per series: steps, raw y, and where known per-point wall
// time `t` and tokens seen) and draws it through the page's view settings, so a setting change
// redraws from the model and a live point is appended to the raw and the smoothed trace alike.
// Trace order: the raw traces (one per series, in the order they were added) come first, then, when
// smoothing is on, the smoothed ones, so data[i] is always series i's raw data.
(function () {
  "use strict";

  // Plotly's default colorway: a series' raw and smoothed traces share their color.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf"];
  const X_MODES = { step: "step", time: "wall time", tokens: "tokens seen" };
  const RAW_OPACITY = 0.25;
  const HOURS_ABOVE_S = 2 * 3600; // wall time reads in minutes up to two hours, in hours beyond
  const COMPACT_HEIGHT = 96;

  // De-biased exponential moving average, as TensorBoard and W&B smooth: s_t = a*s_{t-1} + (1-a)*x_t,
  // shown as s_t / (1 - a^n) where n counts the points seen so far, so the start is not pulled
  // towards 0. A gap (null / NaN) stays a gap and does not reset the average.
  function ema(values, alpha) {
    const a = Math.min(Math.max(Number(alpha) || 0, 0), 0.999);
    const out = new Array(values.length);
    let s = 0, n = 0;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || v === undefined || !Number.isFinite(v)) { out[i] = null; continue; }
      n += 1;
      s = a * s + (1 - a) * v;
      out[i] = a > 0 ? s / (1 - Math.pow(a, n)) : v;
    }
    return out;
  }

  const page = {
    name: null, // "run" or "compare": which part of the "charts" preference is this page's
    view: { smoothing: 0, log: false, x: "step" },
    charts: new Map(), // div -> chart model
    legend: {}, // {family: {series: visible}} of this page, as stored
    legendKey: "legend",
    lookup: null, // step -> {t, tokens}: the run page's shared table (per-series arrays win)
    lookupHasTokens: null,
    timeUnit: "min",
    ready: Promise.resolve(),
  };

  // --- preferences (prefs.js) -------------------------------------------------------------------
  const loadPref = (key) => window.cohortPrefs.load(key);
  const savePref = (key, value) => window.cohortPrefs.save(key, value);

  // --- the toolbar ------------------------------------------------------------------------------
  function buildToolbar(bar) {
    bar.innerHTML = `
      <label class="tool">Smoothing <input type="range" id="cc-smoothing" min="0" max="0.99" step="0.01" value="0">
        <output id="cc-smoothing-value">off</output></label>
      <label class="tool check"><input type="checkbox" id="cc-log"> Log scale (y)</label>
      <label class="tool">X axis <select id="cc-x">
        ${Object.entries(X_MODES).map(([k, v]) => `<option value="${k}">${v}</option>`).join("")}</select></label>
      <span class="muted small" id="cc-note"></span>`;
    const smoothing = bar.querySelector("#cc-smoothing");
    smoothing.addEventListener("change", () => setView({ smoothing: Number(smoothing.value) }));
    // The curve follows the slider while it moves (input), the choice is stored when it is let go.
    smoothing.addEventListener("input", () => setView({ smoothing: Number(smoothing.value) }, { save: false }));
    bar.querySelector("#cc-log").addEventListener("change", (e) => setView({ log: e.target.checked }));
    bar.querySelector("#cc-x").addEventListener("change", (e) => setView({ x: e.target.value }));
  }

  function showView() {
    const v = page.view;
    const slider = document.getElementById("cc-smoothing");
    if (!slider) return;
    if (document.activeElement !== slider) slider.value = String(v.smoothing);
    document.getElementById("cc-smoothing-value").textContent = v.smoothing > 0 ? Number(slider.value).toFixed(2) : "off";
    document.getElementById("cc-log").checked = v.log;
    const select = document.getElementById("cc-x");
    select.value = v.x;
    const tokens = select.querySelector("option[value=tokens]");
    tokens.disabled = !hasTokens();
    tokens.title = tokens.disabled ? "This run reports no completion_tokens" : "";
  }

  async function setView(change, { save = true } = {}) {
    Object.assign(page.view, change);
    if (page.view.x === "tokens" && !hasTokens()) page.view.x = "step";
    showView();
    renderAll();
    if (save) {
      const stored = (await loadPref("charts")) || {};
      stored[page.name] = { ...page.view };
      savePref("charts", stored);
    }
  }

  // --- x values -------------------------------------------------------------------------------
  function hasTokens() {
    if (page.lookupHasTokens && page.lookupHasTokens()) return true;
    for (const chart of page.charts.values()) {
      if (chart.series.some((s) => s.tokens && s.tokens.some((v) => v !== null && v !== undefined))) return true;
    }
    return false;
  }

  function tOf(s, i) {
    if (s.t) return s.t[i] ?? null;
    const row = page.lookup ? page.lookup(s.steps[i]) : null;
    return row && row.t !== undefined ? row.t : null;
  }

  function tokensOf(s, i) {
    if (s.tokens) return s.tokens[i] ?? null;
    const row = page.lookup ? page.lookup(s.steps[i]) : null;
    return row && row.tokens !== undefined ? row.tokens : null;
  }

  function xAt(s, i) {
    if (page.view.x === "time") {
      const t = tOf(s, i);
      return t === null ? null : t / (page.timeUnit === "h" ? 3600 : 60);
    }
    if (page.view.x === "tokens") return tokensOf(s, i);
    return s.steps[i];
  }

  function xs(s, from = 0) {
    const out = [];
    for (let i = from; i < s.steps.length; i++) out.push(xAt(s, i));
    return out;
  }

  function xTitle() {
    if (page.view.x === "time") return page.timeUnit === "h" ? "wall time (hours)" : "wall time (minutes)";
    return page.view.x === "tokens" ? "tokens seen (completion tokens)" : "step";
  }

  // Minutes or hours for the whole page (the hover sync needs one unit on every chart).
  function pickTimeUnit() {
    let most = 0;
    for (const chart of page.charts.values()) {
      for (const s of chart.series) {
        const i = s.steps.length - 1;
        if (i >= 0) most = Math.max(most, tOf(s, i) || 0);
      }
    }
    return most > HOURS_ABOVE_S ? "h" : "min";
  }

  // --- traces and axes ------------------------------------------------------------------------
  function visible(chart, s) { return chart.hidden.has(s.name) ? "legendonly" : true; }

  function rawTrace(chart, s, index) {
    const smooth = page.view.smoothing > 0;
    const color = PALETTE[index % PALETTE.length];
    return {
      type: s.long ? "scattergl" : "scatter", mode: s.long ? "lines" : "lines+markers", name: s.name, meta: s.key,
      x: xs(s), y: s.y.slice(), customdata: s.steps.slice(), legendgroup: s.name, showlegend: !smooth,
      opacity: smooth ? RAW_OPACITY : 1, line: { color }, marker: { size: 4, color }, connectgaps: false,
      hoverinfo: smooth ? "skip" : undefined, visible: visible(chart, s),
    };
  }

  function smoothTrace(chart, s, index) {
    const color = PALETTE[index % PALETTE.length];
    return {
      type: s.long ? "scattergl" : "scatter", mode: "lines", name: s.name, meta: s.key, x: xs(s),
      y: ema(s.y, page.view.smoothing), customdata: s.steps.slice(), legendgroup: s.name, showlegend: true,
      line: { color, width: 2 }, connectgaps: false, visible: visible(chart, s),
    };
  }

  // The y axis: log when asked and every value is positive; a constant series gets a range around
  // its own magnitude (axes.js: Plotly would zoom into its last digits, or pad 0.002 by +-1).
  function yAxisFor(chart) {
    const ys = chart.series.flatMap((s) => s.y).filter((v) => typeof v === "number" && Number.isFinite(v));
    const lo = ys.length ? Math.min(...ys) : 0;
    const fallback = page.view.log && ys.length > 0 && lo <= 0;
    const log = page.view.log && !fallback;
    const axis = { type: log ? "log" : "linear", exponentformat: "e", minexponent: 4, tickformat: "~g",
                   ...window.cohortAxes.axis(ys, { log }) };
    return { axis, fallback, constant: !axis.autorange, log };
  }

  // Every series 0 (or missing) at every step it has: a chart that says nothing on this run (KL at
  // beta 0, a clip that never bites), drawn small where the page asks for it (opts.compactZero).
  function allZero(chart) {
    let seen = false;
    for (const s of chart.series) {
      for (const v of s.y) {
        if (v === null || v === undefined || !Number.isFinite(v)) continue;
        if (v !== 0) return false;
        seen = true;
      }
    }
    return seen;
  }

  function isCompact(chart) { return chart.compactZero && !chart.wide && allZero(chart); }

  // The x axis: in steps, one step alone is drawn between its neighbours with whole-number ticks.
  function xAxisFor(chart) {
    const values = chart.series.flatMap((s) => xs(s));
    const axis = window.cohortAxes.axis(values, { integer: page.view.x === "step" });
    return axis.autorange ? {} : axis; // a varying x keeps the user's zoom (uirevision)
  }

  function layoutFor(chart) {
    const { axis, fallback } = yAxisFor(chart);
    const xaxis = { title: { text: xTitle(), standoff: 4 }, uirevision: page.view.x, exponentformat: "e", minexponent: 6,
                    showspikes: true, spikemode: "across", spikethickness: 1, spikedash: "dot", spikecolor: "#888",
                    ...xAxisFor(chart) };
    if (isCompact(chart)) {
      // One line: the title, a flat trace, and the note; no legend (every series reads the same).
      return {
        title: { text: chart.title, font: { size: 11 } },
        margin: { l: 36, r: 10, t: 26, b: 22 }, height: COMPACT_HEIGHT, showlegend: false, hovermode: "x", autosize: true,
        xaxis: { ...xaxis, title: { text: "" }, tickfont: { size: 9 } },
        yaxis: { ...axis, tickfont: { size: 9 }, nticks: 3, hoverformat: ".4~g", uirevision: `${axis.type}` }, uirevision: "keep",
        annotations: [{ text: "0 on every step", xref: "paper", yref: "paper", x: 1, y: 1, xanchor: "right",
                        yanchor: "top", showarrow: false, font: { size: 11, color: "#555" } }],
      };
    }
    return {
      title: { text: chart.title, font: { size: 13 } },
      margin: { l: 56, r: 10, t: 36, b: 56 }, height: chart.wide ? 520 : chart.height,
      xaxis,
      yaxis: { ...axis, hoverformat: ".4~g", uirevision: `${axis.type}` },
      legend: { orientation: "h", y: chart.wide ? -0.14 : -0.32 }, showlegend: true, uirevision: "keep", hovermode: "x", autosize: true,
      annotations: fallback ? [{ text: "linear: values ≤ 0", xref: "paper", yref: "paper", x: 1, y: 1.08,
                                 xanchor: "right", showarrow: false, font: { size: 10, color: "#9c5700" } }] : [],
    };
  }

  // What decides whether new points can extend the traces in place or the chart must be drawn anew.
  function shapeOf(layout) {
    return JSON.stringify([layout.yaxis.type, layout.yaxis.range || null, layout.xaxis.range || null, layout.height]);
  }

  function render(chart) {
    const raw = chart.series.map((s, i) => rawTrace(chart, s, i));
    const smooth = page.view.smoothing > 0 ? chart.series.map((s, i) => smoothTrace(chart, s, i)) : [];
    const layout = layoutFor(chart);
    Plotly.react(chart.div, [...raw, ...smooth], layout, chart.config);
    chart.yState = shapeOf(layout);
    mark(chart);
  }

  function renderAll() {
    page.timeUnit = pickTimeUnit();
    for (const chart of page.charts.values()) render(chart);
  }

  function mark(chart) {
    const div = chart.div;
    div.dataset.points = String(Math.max(0, ...chart.series.map((s) => s.steps.length)));
    div.dataset.smoothed = String(page.view.smoothing > 0);
    div.dataset.yType = div.layout ? div.layout.yaxis.type : "linear";
    div.dataset.logFallback = String(yAxisFor(chart).fallback);
    const compact = isCompact(chart);
    if (div.dataset.compact !== String(compact)) {
      div.dataset.compact = String(compact);
      div.classList.toggle("chart-compact", compact);
      if (chart.onShape) chart.onShape(compact);
    }
  }

  // --- charts -----------------------------------------------------------------------------------
  // Makes `div` a managed chart (an empty plot with the page's settings). opts: title, family (the
  // legend memory's key), height, onClick(step, point); compactZero: draw the chart small while
  // every value is 0, calling onShape(compact) when that changes; onPin(pinned): offer a pin button.
  function register(div, opts) {
    const chart = {
      div, title: opts.title, family: opts.family, height: opts.height || 260, series: [], wide: false,
      compactZero: !!opts.compactZero, onShape: opts.onShape || null,
      hidden: new Set(Object.entries(page.legend[opts.family] || {}).filter(([, v]) => v === false).map(([k]) => k)),
      config: { responsive: true, displaylogo: false },
    };
    page.charts.set(div, chart);
    div.classList.add("managed-chart");
    Plotly.newPlot(div, [], layoutFor(chart), chart.config);
    addExpandButton(chart);
    if (opts.onPin) addPinButton(chart, opts.onPin, !!opts.pinned);
    div.on("plotly_hover", (event) => syncHover(chart, event));
    div.on("plotly_unhover", () => syncUnhover(chart));
    div.on("plotly_legendclick", (event) => { toggleSeries(chart, event.data[event.curveNumber].name); return false; });
    div.on("plotly_legenddoubleclick", (event) => { isolateSeries(chart, event.data[event.curveNumber].name); return false; });
    if (opts.onClick) {
      div.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        if (point) opts.onClick(point.customdata ?? point.x, point);
      });
    }
    return chart;
  }

  function unregister(div) { page.charts.delete(div); }

  function chartOf(div) { return page.charts.get(div); }

  function seriesOf(chart, name, key, long) {
    let s = chart.series.find((x) => x.name === name);
    if (!s) {
      s = { name, key, steps: [], y: [], t: null, tokens: null, long: !!long };
      chart.series.push(s);
    }
    return s;
  }

  // Replaces one series' data (an HTTP page); call draw(div) after the last one.
  function setSeries(div, name, { key, steps, y, t = null, tokens = null, long = false }) {
    const chart = chartOf(div);
    const s = seriesOf(chart, name, key, long);
    Object.assign(s, { key, steps: steps.slice(), y: y.slice(), t: t ? t.slice() : null,
                       tokens: tokens ? tokens.slice() : null, long: s.long || long });
  }

  function draw(div) {
    const unit = pickTimeUnit();
    if (unit !== page.timeUnit) { renderAll(); } else { render(chartOf(div)); }
    showView();
  }

  // Appends live points: {series name: {key, steps, y}}. Raw and smoothed traces are extended in
  // place (one extendTraces call); a new series, or a change of the y axis, redraws the chart.
  function append(div, perSeries) {
    const chart = chartOf(div);
    const before = chart.series.length;
    const added = [];
    for (const [name, data] of Object.entries(perSeries)) {
      const s = seriesOf(chart, name, data.key, false);
      const from = s.steps.length;
      s.steps.push(...data.steps);
      s.y.push(...data.y);
      if (s.t) s.t.push(...data.steps.map(() => null));
      if (s.tokens) s.tokens.push(...data.steps.map(() => null));
      added.push([s, from]);
    }
    const yState = shapeOf(layoutFor(chart));
    if (chart.series.length !== before || pickTimeUnit() !== page.timeUnit || yState !== chart.yState) {
      draw(div);
      return;
    }
    const indices = [], xsOut = [], ysOut = [];
    const n = chart.series.length;
    for (const [s, from] of added) {
      const i = chart.series.indexOf(s);
      indices.push(i); xsOut.push(xs(s, from)); ysOut.push(s.y.slice(from));
      if (page.view.smoothing > 0) {
        indices.push(n + i); xsOut.push(xs(s, from)); ysOut.push(ema(s.y, page.view.smoothing).slice(from));
      }
    }
    const steps = added.flatMap(([s, from]) => (page.view.smoothing > 0 ? [s.steps.slice(from), s.steps.slice(from)]
      : [s.steps.slice(from)]));
    Plotly.extendTraces(div, { x: xsOut, y: ysOut, customdata: steps }, indices);
    mark(chart);
  }

  // The steps behind an x range of the chart in the current x mode: [first, last] (or null).
  function stepRange(div, lo, hi) {
    const chart = chartOf(div);
    if (page.view.x === "step") return [Number(lo), Number(hi)];
    let first = Infinity, last = -Infinity;
    for (const s of chart.series) {
      for (let i = 0; i < s.steps.length; i++) {
        const x = xAt(s, i);
        if (x !== null && x >= lo && x <= hi) { first = Math.min(first, s.steps[i]); last = Math.max(last, s.steps[i]); }
      }
    }
    return first <= last ? [first, last] : null;
  }

  // --- legend memory ----------------------------------------------------------------------------
  function rememberLegend(chart) {
    const entries = {};
    for (const s of chart.series) entries[s.name] = !chart.hidden.has(s.name);
    page.legend[chart.family] = { ...(page.legend[chart.family] || {}), ...entries };
    savePref(page.legendKey, page.legend);
  }

  function toggleSeries(chart, name) {
    if (chart.hidden.has(name)) chart.hidden.delete(name); else chart.hidden.add(name);
    render(chart);
    rememberLegend(chart);
  }

  function isolateSeries(chart, name) {
    const others = chart.series.map((s) => s.name).filter((n) => n !== name);
    const isolated = !chart.hidden.has(name) && others.every((n) => chart.hidden.has(n));
    chart.hidden = new Set(isolated ? [] : others);
    render(chart);
    rememberLegend(chart);
  }

  // --- hover sync and the chart's buttons (chart-frame.js) ----------------------------------------
  const frame = window.cohortChartFrame;
  const syncHover = (chart, event) => frame.syncHover(page.charts.values(), chart, event);
  const syncUnhover = (chart) => frame.syncUnhover(page.charts.values(), chart);
  const addExpandButton = (chart) => frame.addButton(chart.div, "chart-expand", "⤢", "Full width (Esc restores)",
                                                    () => setWide(chart, !chart.wide));
  const addPinButton = (chart, onPin, pinned) => frame.addPin(chart.div, pinned, onPin);

  // Draws a chart again at its container's width (after it moved, or its folded section opened:
  // a chart drawn while hidden has no width of its own).
  function refit(div) {
    const chart = chartOf(div);
    if (!chart || !div.offsetParent) return;
    Plotly.relayout(div, { height: isCompact(chart) ? COMPACT_HEIGHT : chart.wide ? 520 : chart.height,
                           width: null, autosize: true });
  }

  function setWide(chart, wide) {
    chart.wide = wide;
    chart.div.classList.toggle("chart-wide", wide);
    chart.div.dataset.wide = String(wide);
    // width null + autosize: Plotly measures the div again (it now spans the grid, or no longer
    // does). Not Plots.resize: 100 ms later it deletes the layout's height and takes the div's.
    if (chart.compactZero && allZero(chart)) {
      render(chart); // a flat chart opened full width is drawn in full (and small again when closed)
    } else {
      Plotly.relayout(chart.div, { height: wide ? 520 : chart.height, width: null, autosize: true,
                                   "legend.y": wide ? -0.14 : -0.32 });
    }
    if (wide) chart.div.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    for (const chart of page.charts.values()) if (chart.wide) setWide(chart, false);
  });

  // --- setup ------------------------------------------------------------------------------------
  // Builds the toolbar in `bar` and loads the user's stored choices; `ready` resolves once they
  // are known, so the first draw already uses them.
  function init(name, bar) {
    page.name = name;
    page.legendKey = name === "run" ? "legend" : `legend.${name}`;
    window.cohortPrefs.configure(bar ? bar.dataset.prefsUrl || null : null);
    if (bar) buildToolbar(bar);
    page.ready = (async () => {
      const [charts, legend] = await Promise.all([loadPref("charts"), loadPref(page.legendKey)]);
      const mine = charts && charts[name];
      if (mine) {
        page.view.smoothing = Math.min(Math.max(Number(mine.smoothing) || 0, 0), 0.99);
        page.view.log = mine.log === true;
        page.view.x = X_MODES[mine.x] ? mine.x : "step";
      }
      page.legend = legend || {};
      showView();
      if (bar) bar.dataset.ready = "1";
    })();
    return page.ready;
  }

  // The run page's step -> {t, tokens} table, and whether it holds any tokens.
  function setLookup(fn, hasTokensFn) { page.lookup = fn; page.lookupHasTokens = hasTokensFn; }

  function note(text) { const el = document.getElementById("cc-note"); if (el) el.textContent = text; }

  window.cohortCharts = {
    ema, init, register, unregister, setSeries, draw, append, stepRange, setLookup, renderAll, note, setView, refit,
    get view() { return { ...page.view }; },
    get ready() { return page.ready; },
  };
})();
