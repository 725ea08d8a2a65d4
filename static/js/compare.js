// Run comparison: one chart per chosen metric, one trace per run (downsampled on the server like
// the run page), drawn through chart-controls.js (smoothing, log y, x by step / wall time / tokens
// seen, synced hover, remembered legend). Clicking a point opens that run's step.
(function () {
  "use strict";

  const cc = window.cohortCharts;

  window.addEventListener("DOMContentLoaded", async () => {
    const source = document.getElementById("compare-data");
    if (!source) return;
    const data = JSON.parse(source.textContent);
    const container = document.getElementById("compare-charts");
    cc.init("compare", document.getElementById("chart-toolbar"));
    await cc.ready; // the user's stored settings apply to the first draw
    for (const metric of data.metrics) {
      const div = document.createElement("div");
      div.className = "chart";
      div.id = "compare-" + metric.key.replace(/[^a-z0-9_]/gi, "-");
      container.appendChild(div);
      cc.register(div, {
        title: metric.key, family: metric.key, height: 300,
        onClick: (step, point) => {
          location.href = point.data.meta.replace("/steps/0/", `/steps/${Math.round(Number(step))}/`);
        },
      });
      const runs = data.runs.filter((run) => metric.traces[run.id]);
      for (const run of runs) {
        const t = metric.traces[run.id];
        // A legend entry per run: two runs of the same name are told apart by their id.
        const twin = data.runs.some((other) => other !== run && other.name === run.name);
        // One color per run on every chart, even where another run has no such metric.
        cc.setSeries(div, twin ? `${run.name} (#${run.id})` : run.name, { key: run.step_url, steps: t.x, y: t.y, t: t.t || null, tokens: t.tokens || null,
                                      long: t.total > 1000, color: data.runs.indexOf(run) });
      }
      cc.draw(div);
      div.dataset.traces = String(runs.length);
    }
  });
})();
