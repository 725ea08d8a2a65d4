// Readable axes for values that do not vary, shared by every chart of the site (run page, compare,
// example history, group page, heatmaps). Plotly autoranges a constant around itself at the scale of
// its last digits: 0.56662966 drawn alone gets ticks 0.5666296599 ... 0.5666296601, cut to
// "56662966" by the margin, and a single step gets ticks at 4.6, 4.8, 5, 5.2. Here a (nearly)
// constant axis gets a range around the value at the value's own magnitude instead; anything that
// varies keeps Plotly's autorange.
(function () {
  "use strict";

  // Below this relative spread a series is constant for drawing: floating noise (0.5 vs
  // 0.5000000001) would otherwise set the tick spacing.
  const RELATIVE_SPREAD = 1e-9;

  function finite(values) {
    const out = [];
    for (const v of values || []) {
      if (Array.isArray(v)) out.push(...finite(v)); // a heatmap's rows
      else if (typeof v === "number" && Number.isFinite(v)) out.push(v);
    }
    return out;
  }

  // [lo, hi] that shows `values` readably when they are (nearly) constant; null when they vary (or
  // there are none) and Plotly's autorange reads well. opts.log: the axis is logarithmic (the range
  // is then in log10 units); opts.integer: whole numbers such as steps (one unit either side);
  // opts.floor: no value can be below it (a share, a variance), so the range does not go under it.
  function constantRange(values, { log = false, integer = false, floor = null } = {}) {
    const ys = finite(values);
    if (!ys.length) return null;
    let lo = Infinity, hi = -Infinity;
    for (const v of ys) { if (v < lo) lo = v; if (v > hi) hi = v; }
    const scale = Math.max(Math.abs(lo), Math.abs(hi));
    if (hi - lo > RELATIVE_SPREAD * scale) return null;
    const v = (lo + hi) / 2;
    if (log && v > 0) return [Math.log10(v) - 0.3, Math.log10(v) + 0.3];
    let range;
    if (integer) range = [v - 1, v + 1];
    else if (scale === 0) range = [-1, 1];
    else range = [v - scale / 2, v + scale / 2];
    if (floor !== null && range[0] < floor) range = [floor, Math.max(range[1], floor + 1)];
    return range;
  }

  // Axis properties for Plotly: a fixed range when the values are constant, autorange otherwise.
  function axis(values, opts = {}) {
    const range = constantRange(values, opts);
    if (!range) return { autorange: true };
    const out = { autorange: false, range };
    if (opts.integer) out.dtick = 1;
    return out;
  }

  // A heatmap's color scale: zmin / zmax around a constant z (a constant would leave the color bar
  // with one value and no ticks), nothing when z varies.
  function colorRange(z, opts = {}) {
    const range = constantRange(z, { ...opts, log: false, integer: false });
    return range ? { zmin: range[0], zmax: range[1] } : {};
  }

  window.cohortAxes = { constantRange, axis, colorRange };
})();
