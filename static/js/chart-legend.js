// Which series a managed chart (chart-controls.js) shows: a legend click hides or shows a series, a
// double click shows it alone (or everything again), and the choice is remembered per user and chart
// family on the server (prefs.js: "legend" on the run page, "legend.<page>" elsewhere).
(function () {
  "use strict";

  const page = window.cohortChartView.page;

  // The series names a new chart of `family` starts hidden, as stored.
  function hiddenFor(family) {
    return new Set(Object.entries(page.legend[family] || {}).filter(([, v]) => v === false).map(([k]) => k));
  }

  function remember(chart) {
    const entries = {};
    for (const s of chart.series) entries[s.name] = !chart.hidden.has(s.name);
    page.legend[chart.family] = { ...(page.legend[chart.family] || {}), ...entries };
    window.cohortPrefs.save(page.legendKey, page.legend);
  }

  function toggleSeries(chart, name) {
    if (chart.hidden.has(name)) chart.hidden.delete(name); else chart.hidden.add(name);
    window.cohortChartTraces.render(chart);
    remember(chart);
  }

  function isolateSeries(chart, name) {
    const others = chart.series.map((s) => s.name).filter((n) => n !== name);
    const isolated = !chart.hidden.has(name) && others.every((n) => chart.hidden.has(n));
    chart.hidden = new Set(isolated ? [] : others);
    window.cohortChartTraces.render(chart);
    remember(chart);
  }

  window.cohortChartLegend = { hiddenFor, toggleSeries, isolateSeries };
})();
