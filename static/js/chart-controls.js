// Chart controls shared by the run page (run-live.js) and the compare page (compare.js): a toolbar
// (smoothing, log y, x axis by step / wall time / tokens seen), hover synced across the page's
// charts, legend choices remembered per user on the server (prefs.js), a full-width toggle per
// chart, and axis ticks that show small values as themselves.
//
// Each chart keeps its data as a model (per series: steps, raw y, and where known per-point wall
// time `t` and tokens seen) and draws it through the page's view settings, so a setting change
// redraws from the model and a live point is appended to the raw and the smoothed trace alike.
//
// This file is the pages' one entry point (window.cohortCharts): it registers charts and feeds their
// models. The rest lives beside it, loaded before it: the view and the x values (chart-view.js), the
// traces and layout drawn from a model (chart-traces.js), the toolbar (chart-toolbar.js), the legend's
// series choices (chart-legend.js), hover sync and the buttons (chart-frame.js).
(function () {
  "use strict";

  const cv = window.cohortChartView;
  const page = cv.page;
  const traces = window.cohortChartTraces;
  const toolbar = window.cohortChartToolbar;
  const legend = window.cohortChartLegend;
  const { xs, ema } = cv;
  const { render, renderAll, mark } = traces;

  // --- charts -----------------------------------------------------------------------------------
  // Makes `div` a managed chart (an empty plot with the page's settings). opts: title, family (the
  // legend memory's key), height, onClick(step, point); compactZero: draw the chart small while
  // every value is 0, calling onShape(compact) when that changes; onPin(pinned): offer a pin button.
  function register(div, opts) {
    const chart = {
      div, title: opts.title, family: opts.family, height: opts.height || 260, series: [], wide: false,
      compactZero: !!opts.compactZero, onShape: opts.onShape || null,
      hidden: legend.hiddenFor(opts.family),
      config: { responsive: true, displaylogo: false },
    };
    chart.inView = true; // until the browser says otherwise
    page.charts.set(div, chart);
    div.classList.add("managed-chart");
    if (inViewObserver) inViewObserver.observe(div);
    Plotly.newPlot(div, [], traces.layoutFor(chart), chart.config);
    addExpandButton(chart);
    if (opts.onPin) addPinButton(chart, opts.onPin, !!opts.pinned);
    div.on("plotly_hover", (event) => syncHover(chart, event));
    div.on("plotly_unhover", () => syncUnhover(chart));
    div.on("plotly_legendclick", (event) => { legend.toggleSeries(chart, event.data[event.curveNumber].name); return false; });
    div.on("plotly_legenddoubleclick", (event) => { legend.isolateSeries(chart, event.data[event.curveNumber].name); return false; });
    if (opts.onClick) {
      div.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        if (point) opts.onClick(point.customdata ?? point.x, point);
      });
    }
    return chart;
  }

  function unregister(div) {
    if (inViewObserver) inViewObserver.unobserve(div);
    page.charts.delete(div);
  }

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
  // `color`: the series' palette slot when it must match other charts (compare: one color per run);
  // by default its position in this chart. `band`: {low, high} per step, drawn as a filled area around
  // the series (compare: a group of seeds, `y` its mean); `hover`: the text its points show on hover.
  function setSeries(div, name, { key, steps, y, t = null, tokens = null, long = false, color = null,
                                  band = null, hover = null }) {
    const chart = chartOf(div);
    const s = seriesOf(chart, name, key, long);
    Object.assign(s, { key, steps: steps.slice(), y: y.slice(), t: t ? t.slice() : null,
                       tokens: tokens ? tokens.slice() : null, long: s.long || long, color,
                       band: band ? { low: band.low.slice(), high: band.high.slice() } : null, hover });
  }

  function draw(div) {
    const unit = cv.pickTimeUnit();
    if (unit !== page.timeUnit) { renderAll(); } else { render(chartOf(div)); }
    toolbar.show();
  }

  // Appends live points: {series name: {key, steps, y}}. The model takes them at once; the chart
  // draws them at the next flush (at most once every DRAW_EVERY_MS, and only while it is in view:
  // a chart off-screen or in a folded section draws what it gathered when it comes into view), so a
  // run storing ten steps a second costs the page one redraw a second of what it shows, and its
  // buttons answer at once. A flush extends the traces in place (one extendTraces call per chart);
  // a new series, or a change of the y axis, draws the chart anew.
  function append(div, perSeries) {
    const chart = chartOf(div);
    if (!chart) return;
    chart.undrawn = chart.undrawn || new Map(); // series -> index of its first point not drawn yet
    for (const [name, data] of Object.entries(perSeries)) {
      const s = seriesOf(chart, name, data.key, false);
      if (!chart.undrawn.has(s)) chart.undrawn.set(s, s.steps.length);
      s.steps.push(...data.steps);
      s.y.push(...data.y);
      if (s.t) s.t.push(...data.steps.map(() => null));
      if (s.tokens) s.tokens.push(...data.steps.map(() => null));
    }
    div.dataset.points = String(Math.max(0, ...chart.series.map((s) => s.steps.length))); // what the model holds
    // A chart that changes its shape (a flat "0 on every step" chart whose first non-zero value
    // arrives) moves on the page: it is drawn at the next round even out of view.
    if (chart.compactZero && traces.isCompact(chart) !== (div.dataset.compact === "true")) chart.mustDraw = true;
    scheduleFlush();
  }

  // Drawing is the page's heaviest work (Plotly redraws a chart's SVG whole on every extendTraces), so
  // it is paced by its own cost: one chart per animation frame (no long task holds a click back), and
  // the next round no sooner than DRAW_EVERY_MS, or three times what this round took, after it ends.
  // The charts then take at most about a quarter of the page's main thread, whatever the run's speed.
  const DRAW_EVERY_MS = 1000;
  const DRAW_SHARE = 0.25;
  let flushTimer = null;
  let nextFlushAt = 0;

  function scheduleFlush() {
    if (flushTimer !== null) return;
    flushTimer = setTimeout(flush, Math.max(0, nextFlushAt - Date.now()));
  }

  function flush() {
    const queue = [...page.charts.values()].filter((c) => c.undrawn && c.undrawn.size && (c.inView || c.mustDraw));
    let spent = 0;
    const next = () => {
      const chart = queue.shift();
      if (!chart) {
        flushTimer = null;
        nextFlushAt = Date.now() + Math.max(DRAW_EVERY_MS, spent * (1 - DRAW_SHARE) / DRAW_SHARE);
        return;
      }
      const started = performance.now();
      if (chart.undrawn.size && page.charts.has(chart.div)) drawUndrawn(chart);
      spent += performance.now() - started;
      requestAnimationFrame(next);
    };
    requestAnimationFrame(next);
  }

  function drawUndrawn(chart) {
    chart.mustDraw = false;
    const pending = chart.undrawn;
    chart.undrawn = new Map();
    const yState = traces.shapeOf(traces.layoutFor(chart));
    if (chart.series.length !== chart.drawnSeries || cv.pickTimeUnit() !== page.timeUnit || yState !== chart.yState
        || traces.modesOf(chart) !== chart.drawnModes) {
      draw(chart.div);
      return;
    }
    const indices = [], xsOut = [], ysOut = [], steps = [];
    const n = chart.series.length;
    for (const [s, from] of pending) {
      const i = chart.series.indexOf(s);
      indices.push(i); xsOut.push(xs(s, from)); ysOut.push(s.y.slice(from)); steps.push(s.steps.slice(from));
      if (page.view.smoothing > 0) {
        indices.push(n + i); xsOut.push(xs(s, from)); ysOut.push(ema(s.y, page.view.smoothing).slice(from));
        steps.push(s.steps.slice(from));
      }
    }
    Plotly.extendTraces(chart.div, { x: xsOut, y: ysOut, customdata: steps }, indices);
    mark(chart);
  }

  // Charts in view, watched by the browser (no layout work of ours on scroll): one scrolled into
  // view, or shown by opening its section, draws what it gathered meanwhile.
  const inViewObserver = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const chart = chartOf(entry.target);
      if (!chart) continue;
      chart.inView = entry.isIntersecting;
      if (chart.inView && chart.undrawn && chart.undrawn.size) drawUndrawn(chart);
    }
  }, { rootMargin: "300px 0px" }) : null;

  // The steps behind an x range of the chart in the current x mode: [first, last] (or null).
  function stepRange(div, lo, hi) {
    const chart = chartOf(div);
    if (page.view.x === "step") return [Number(lo), Number(hi)];
    let first = Infinity, last = -Infinity;
    for (const s of chart.series) {
      for (let i = 0; i < s.steps.length; i++) {
        const x = cv.xAt(s, i);
        if (x !== null && x >= lo && x <= hi) { first = Math.min(first, s.steps[i]); last = Math.max(last, s.steps[i]); }
      }
    }
    return first <= last ? [first, last] : null;
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
    Plotly.relayout(div, { height: traces.isCompact(chart) ? traces.COMPACT_HEIGHT : chart.wide ? 520 : chart.height,
                           width: null, autosize: true });
  }

  function setWide(chart, wide) {
    chart.wide = wide;
    chart.div.classList.toggle("chart-wide", wide);
    chart.div.dataset.wide = String(wide);
    // width null + autosize: Plotly measures the div again (it now spans the grid, or no longer
    // does). Not Plots.resize: 100 ms later it deletes the layout's height and takes the div's.
    if (chart.compactZero && traces.allZero(chart)) {
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
    if (bar) toolbar.build(bar);
    page.ready = (async () => {
      const [charts, stored] = await Promise.all([window.cohortPrefs.load("charts"), window.cohortPrefs.load(page.legendKey)]);
      toolbar.restore(charts && charts[name]);
      page.legend = stored || {};
      toolbar.show();
      if (bar) bar.dataset.ready = "1";
    })();
    return page.ready;
  }

  // The run page's step -> {t, tokens} table, and whether it holds any tokens.
  function setLookup(fn, hasTokensFn) { page.lookup = fn; page.lookupHasTokens = hasTokensFn; }

  function note(text) { const el = document.getElementById("cc-note"); if (el) el.textContent = text; }

  window.cohortCharts = {
    ema, init, register, unregister, setSeries, draw, append, stepRange, setLookup, renderAll, note,
    setView: toolbar.setView, refit,
    get view() { return { ...page.view }; },
    get ready() { return page.ready; },
  };
})();
