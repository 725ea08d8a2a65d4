// The page's view settings for its managed charts (chart-controls.js), and the x values they give a
// series: the state every chart module shares (the charts, the view, the legend choices, the run
// page's step -> {t, tokens} table), the smoothing (a de-biased EMA), and x by step / wall time /
// tokens seen.
(function () {
  "use strict";

  const X_MODES = { step: "step", time: "wall time", tokens: "tokens seen" };
  const HOURS_ABOVE_S = 2 * 3600; // wall time reads in minutes up to two hours, in hours beyond

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

  window.cohortChartView = { page, X_MODES, ema, hasTokens, xAt, xs, xTitle, pickTimeUnit };
})();
