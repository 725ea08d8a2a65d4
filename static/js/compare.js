// Run comparison: one chart per chosen metric, one trace per run (downsampled on the server like
// the run page). Clicking a point opens that run's step.
(function () {
  "use strict";

  window.addEventListener("DOMContentLoaded", () => {
    const source = document.getElementById("compare-data");
    if (!source) return;
    const data = JSON.parse(source.textContent);
    const container = document.getElementById("compare-charts");
    for (const metric of data.metrics) {
      const div = document.createElement("div");
      div.className = "chart";
      div.id = "compare-" + metric.key.replace(/[^a-z0-9_]/gi, "-");
      container.appendChild(div);
      const traces = data.runs.filter((run) => metric.traces[run.id]).map((run) => {
        const t = metric.traces[run.id];
        return { type: t.total > 1000 ? "scattergl" : "scatter", mode: t.total > 1000 ? "lines" : "lines+markers",
                 name: run.name, x: t.x, y: t.y, marker: { size: 4 }, meta: run.step_url, connectgaps: false };
      });
      Plotly.newPlot(div, traces, {
        title: { text: metric.key, font: { size: 13 } }, height: 300, margin: { l: 50, r: 10, t: 36, b: 60 },
        xaxis: { title: { text: "step", standoff: 4 } }, legend: { orientation: "h", y: -0.3 }, showlegend: true,
      }, { responsive: true, displaylogo: false });
      div.dataset.traces = String(traces.length);
      div.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        if (point) location.href = point.data.meta.replace("/steps/0/", `/steps/${Math.round(point.x)}/`);
      });
    }
  });
})();
