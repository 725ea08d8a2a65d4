// How a managed chart (chart-controls.js) is drawn from its model through the page's view
// (chart-view.js): its traces, its axes and layout, the small "0 on every step" form, and the data-*
// marks the tests and run-sections.js read.
//
// Trace order: the raw traces (one per series, in the order they were added) come first, then, when
// smoothing is on, the smoothed ones, so data[i] is always series i's raw data; last, for each series
// with a band (a group of seeds on the compare page), its lower edge and its upper edge filled down to
// it ("tonexty"), in the series' color, neither in the legend nor hoverable.
(function () {
  "use strict";

  const cv = window.cohortChartView;
  const page = cv.page;

  // Plotly's default colorway: a series' raw and smoothed traces share their color.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf"];
  const RAW_OPACITY = 0.25;
  const COMPACT_HEIGHT = 96;

  function visible(chart, s) { return chart.hidden.has(s.name) ? "legendonly" : true; }
  function colorOf(s, index) { return PALETTE[(s.color ?? index) % PALETTE.length]; }

  const BAND_ALPHA = 0.2;

  // A series' own hover text (a group's label, size and runs) above its value.
  function hoverOf(s) {
    return s.hover ? { hovertemplate: `${s.hover}<br>%{y:.4~g}<extra></extra>` } : {};
  }

  // Markers up to MARKERS_UP_TO points, a line beyond: SVG draws a marker as an element of its own, and
  // a chart of a few hundred markers per series costs many times a line's redraw.
  const MARKERS_UP_TO = 200;
  function modeOf(s) { return s.long || s.steps.length > MARKERS_UP_TO ? "lines" : "lines+markers"; }
  function modesOf(chart) { return chart.series.map(modeOf).join(","); }

  function rawTrace(chart, s, index) {
    const smooth = page.view.smoothing > 0;
    const color = colorOf(s, index);
    return {
      type: "scatter", mode: modeOf(s), name: s.name, meta: s.key,
      x: cv.xs(s), y: s.y.slice(), customdata: s.steps.slice(), legendgroup: s.name, showlegend: !smooth,
      opacity: smooth ? RAW_OPACITY : 1, line: { color }, marker: { size: 4, color }, connectgaps: false,
      hoverinfo: smooth ? "skip" : undefined, visible: visible(chart, s), ...(smooth ? {} : hoverOf(s)),
    };
  }

  function smoothTrace(chart, s, index) {
    const color = colorOf(s, index);
    return {
      type: "scatter", mode: "lines", name: s.name, meta: s.key, x: cv.xs(s),
      y: cv.ema(s.y, page.view.smoothing), customdata: s.steps.slice(), legendgroup: s.name, showlegend: true,
      line: { color, width: 2 }, connectgaps: false, visible: visible(chart, s), ...hoverOf(s),
    };
  }

  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // A band's two edges (smoothed as the series is, so the band stays around the drawn curve).
  function bandTraces(chart, s, index) {
    const color = colorOf(s, index);
    const edge = (ys) => (page.view.smoothing > 0 ? cv.ema(ys, page.view.smoothing) : ys.slice());
    const common = { type: "scatter", mode: "lines", name: s.name, legendgroup: s.name,
                     showlegend: false, hoverinfo: "skip", hoveron: "points", x: cv.xs(s), connectgaps: false,
                     line: { width: 0, color }, visible: visible(chart, s) };
    return [{ ...common, y: edge(s.band.low), cohortBand: "low" },
            { ...common, y: edge(s.band.high), cohortBand: "high", fill: "tonexty", fillcolor: rgba(color, BAND_ALPHA) }];
  }

  // The y axis: log when asked and every value is positive; a constant series gets a range around
  // its own magnitude (axes.js: Plotly would zoom into its last digits, or pad 0.002 by +-1).
  function yAxisFor(chart) {
    const ys = chart.series.flatMap((s) => (s.band ? [...s.y, ...s.band.low, ...s.band.high] : s.y))
      .filter((v) => typeof v === "number" && Number.isFinite(v));
    let lo = ys.length ? Infinity : 0; // a loop: Math.min(...ys) overflows the call stack on a long series
    for (const v of ys) if (v < lo) lo = v;
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
    const values = chart.series.flatMap((s) => cv.xs(s));
    const axis = window.cohortAxes.axis(values, { integer: page.view.x === "step" });
    return axis.autorange ? {} : axis; // a varying x keeps the user's zoom (uirevision)
  }

  // A sweep's groups (many bands) hover one at a time: a label per group at once would fill the chart.
  const MANY_BANDS = 12;
  function hovermodeOf(chart) {
    return chart.series.filter((s) => s.band).length > MANY_BANDS ? "closest" : "x";
  }

  const LONG_TITLE = 70; // characters

  function layoutFor(chart) {
    const { axis, fallback } = yAxisFor(chart);
    const xaxis = { title: { text: cv.xTitle(), standoff: 4 }, uirevision: page.view.x, exponentformat: "e", minexponent: 6,
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
      // A long title (the Tokens charts') in a smaller font: at 13px it runs under the expand and pin buttons.
      title: { text: chart.title, font: { size: chart.title.length > LONG_TITLE ? 11 : 13 } },
      margin: { l: 56, r: 10, t: 36, b: 56 }, height: chart.wide ? 520 : chart.height,
      xaxis,
      yaxis: { ...axis, hoverformat: ".4~g", uirevision: `${axis.type}` },
      legend: { orientation: "h", y: chart.wide ? -0.14 : -0.32 }, showlegend: true, uirevision: "keep", hovermode: hovermodeOf(chart), autosize: true,
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
    const bands = chart.series.flatMap((s, i) => (s.band ? bandTraces(chart, s, i) : []));
    const layout = layoutFor(chart);
    // Before Plotly.react, which fills the layout's autoranged axes in: taken after, the shape never
    // matched the next one and every live point redrew its chart whole instead of extending it.
    chart.yState = shapeOf(layout);
    Plotly.react(chart.div, [...raw, ...smooth, ...bands], layout, chart.config);
    chart.drawnSeries = chart.series.length;
    chart.drawnModes = modesOf(chart);
    if (chart.undrawn) chart.undrawn.clear(); // drawn whole: nothing is left to extend
    mark(chart);
  }

  function renderAll() {
    page.timeUnit = cv.pickTimeUnit();
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

  window.cohortChartTraces = { COMPACT_HEIGHT, layoutFor, shapeOf, modesOf, render, renderAll, mark, allZero, isCompact };
})();
