// Run comparison: one chart per chosen metric, drawn through chart-controls.js (smoothing, log y, x by
// step / wall time / tokens seen, synced hover, remembered legend). Runs that differ only in their seed
// come as groups, computed on the server (webapp/runs/charts/compare.py): a group of several runs is
// one mean curve with its band (data.band: a bootstrap CI, min-max or std) whose hover names its runs;
// a run alone in its group is one trace, downsampled on the server like the run page, and clicking one
// of its points opens that run's step. One color per group (per run with band "none") on every chart.
(function () {
  "use strict";

  const cc = window.cohortCharts;

  // What a chart draws: [{group or null, run or null}] in color order. Without groups (band "none"),
  // every run on its own, colored by its position as before groups existed.
  function drawn(data) {
    const runs = new Map(data.runs.map((run) => [run.id, run]));
    if (!data.groups) return data.runs.map((run, i) => ({ group: null, runs: [run], color: i }));
    return data.groups.map((group) => ({ group, runs: group.runs.map((id) => runs.get(id)), color: group.id }));
  }

  function runName(data, run) {
    // Two runs of the same name are told apart by their id.
    const twin = data.runs.some((other) => other !== run && other.name === run.name);
    return twin ? `${run.name} (#${run.id})` : run.name;
  }

  function groupHover(entry) {
    const names = entry.runs.map((run) => `${escapeHtml(run.name)} (#${run.id})`);
    return `<b>${escapeHtml(entry.group.label)}</b><br>mean of n=${entry.runs.length}: ${names.join(", ")}`;
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }

  window.addEventListener("DOMContentLoaded", async () => {
    const source = document.getElementById("compare-data");
    if (!source) return;
    const data = JSON.parse(source.textContent);
    const container = document.getElementById("compare-charts");
    cc.init("compare", document.getElementById("chart-toolbar"));
    await cc.ready; // the user's stored settings apply to the first draw
    const entries = drawn(data);
    for (const metric of data.metrics) {
      const div = document.createElement("div");
      div.className = "chart";
      div.id = "compare-" + metric.key.replace(/[^a-z0-9_]/gi, "-");
      container.appendChild(div);
      cc.register(div, {
        title: metric.key, family: metric.key, height: 300,
        onClick: (step, point) => {
          if (!point.data.meta) return; // a group's mean: no one run's step to open
          location.href = point.data.meta.replace("/steps/0/", `/steps/${Math.round(Number(step))}/`);
        },
      });
      let traces = 0, bands = 0;
      for (const entry of entries) {
        const band = entry.group && metric.bands[entry.group.id];
        if (band) {
          cc.setSeries(div, `${entry.group.label} (n=${entry.runs.length})`, {
            key: null, steps: band.x, y: band.mean, t: band.t, tokens: band.tokens, long: band.total > 1000,
            color: entry.color, band: { low: band.low, high: band.high }, hover: groupHover(entry) });
          bands += 1;
        } else if (entry.runs.length === 1 && metric.traces[entry.runs[0].id]) {
          const run = entry.runs[0];
          const t = metric.traces[run.id];
          cc.setSeries(div, runName(data, run), { key: run.step_url, steps: t.x, y: t.y, t: t.t || null,
                                                  tokens: t.tokens || null, long: t.total > 1000, color: entry.color });
        } else {
          continue; // no value of this metric
        }
        traces += 1;
      }
      cc.draw(div);
      div.dataset.traces = String(traces);
      div.dataset.bands = String(bands);
    }
  });
})();
