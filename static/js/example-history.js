// Per-example history: the reward spread of one training example at every step that drew it
// (each rollout's reward as a point, the mean line, the min-max band), and the variance and
// similarity of its module groups there. Clicking a point opens that visit's trajectory inspector.
(function () {
  "use strict";

  const PALETTE = ["#3b5bdb", "#f08c00", "#2b8a3e", "#c2255c", "#7048e8", "#0b7285", "#e8590c", "#5c940d"];
  const GL_ABOVE = 2000; // points: WebGL beyond this many (an example drawn every epoch of a long run)

  // Points of one visit are spread across a fraction of the smallest gap between visits, so a
  // step's points never reach the next visit's; the same rollout always lands at the same place.
  function jitterWidth(steps) {
    let gap = Infinity;
    for (let i = 1; i < steps.length; i += 1) gap = Math.min(gap, steps[i] - steps[i - 1]);
    return 0.3 * (Number.isFinite(gap) ? gap : 1);
  }

  function rewardTraces(data) {
    const width = jitterWidth(data.steps);
    const x = [], y = [], text = [], urls = [];
    data.rewards.forEach((rewards, v) => {
      rewards.forEach((reward, j) => {
        const offset = rewards.length > 1 ? (j / (rewards.length - 1) - 0.5) * width : 0;
        x.push(data.steps[v] + offset);
        y.push(reward);
        text.push(`step ${data.steps[v]} · rollout ${data.indices[v][j]}`);
        urls.push(data.urls[v]);
      });
    });
    return [
      { type: "scatter", mode: "lines", name: "min", x: data.steps, y: data.low, line: { width: 0 },
        hoverinfo: "skip", showlegend: false },
      { type: "scatter", mode: "lines", name: "min–max", x: data.steps, y: data.high, line: { width: 0 },
        fill: "tonexty", fillcolor: "rgba(59, 91, 219, 0.14)", hoverinfo: "skip" },
      { type: "scatter", mode: "lines+markers", name: "mean", x: data.steps, y: data.mean,
        line: { color: "#3b5bdb", width: 2 }, marker: { size: 5 }, customdata: data.urls,
        hovertemplate: "step %{x}<br>mean %{y:.3f}<extra></extra>" },
      { type: y.length > GL_ABOVE ? "scattergl" : "scatter", mode: "markers", name: "rollouts", x, y, text,
        customdata: urls, marker: { size: 6, color: "rgba(240, 140, 0, 0.75)", line: { width: 0 } },
        hovertemplate: "%{text}<br>reward %{y:.3f}<extra></extra>" },
    ];
  }

  function groupTraces(data) {
    const traces = [];
    data.modules.forEach((module, i) => {
      const color = PALETTE[i % PALETTE.length];
      traces.push({ type: "scatter", mode: "lines+markers", name: `${module.name} variance`, x: data.steps,
                    y: module.variance, line: { color, width: 2 }, marker: { size: 5 }, connectgaps: false,
                    customdata: data.urls });
      traces.push({ type: "scatter", mode: "lines+markers", name: `${module.name} similarity`, x: data.steps,
                    y: module.similarity, yaxis: "y2", line: { color, width: 1.5, dash: "dot" },
                    marker: { size: 4, symbol: "diamond" }, connectgaps: false, customdata: data.urls });
    });
    return traces;
  }

  function openOnClick(div) {
    div.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      const url = point && point.customdata;
      if (url) location.href = url;
    });
  }

  function draw() {
    const source = document.getElementById("history-data");
    if (!source || !window.Plotly) return;
    const data = JSON.parse(source.textContent);
    const config = { responsive: true, displaylogo: false };
    // An example seen once, or with the same reward every time, still gets readable axes (axes.js).
    const axes = window.cohortAxes;
    const xaxis = { title: { text: "step", standoff: 4 }, zeroline: false, ...axes.axis(data.steps, { integer: true }) };
    const legend = { orientation: "h", y: -0.28 };

    const rewards = document.getElementById("reward-chart");
    const traces = rewardTraces(data);
    Plotly.newPlot(rewards, traces, {
      height: 320, margin: { l: 50, r: 10, t: 10, b: 70 }, xaxis, legend, hovermode: "closest",
      yaxis: { title: { text: "total reward" }, ...axes.axis([traces[3].y, data.mean, data.low, data.high]) },
    }, config);
    rewards.dataset.points = String(traces[3].x.length);
    rewards.dataset.drawn = "1";
    openOnClick(rewards);

    const groups = document.getElementById("group-chart");
    if (groups && data.modules.length) {
      Plotly.newPlot(groups, groupTraces(data), {
        height: 300, margin: { l: 50, r: 60, t: 10, b: 70 }, xaxis, legend, hovermode: "closest",
        yaxis: { title: { text: "group reward variance" }, rangemode: "tozero",
                 ...axes.axis(data.modules.map((m) => m.variance), { floor: 0 }) },
        yaxis2: { title: { text: "similarity (token F1)" }, overlaying: "y", side: "right", range: [0, 1.02],
                  dtick: 0.2, tickformat: ".1f", showgrid: false, zeroline: false },
      }, config);
      groups.dataset.traces = String(2 * data.modules.length);
      groups.dataset.drawn = "1";
      openOnClick(groups);
    }
  }

  window.addEventListener("DOMContentLoaded", draw);
})();
