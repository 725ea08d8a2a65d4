// Inspector pages: prompts on demand, sorting and filtering the trajectory grid's rollouts, and the
// group page's advantage chart (used vs GRPO on the sum vs GDPO, member by member).
(function () {
  "use strict";

  // Prompts are long and rarely read: each loads from the server the first time it is opened.
  function wirePrompts() {
    for (const button of document.querySelectorAll(".prompt-toggle")) {
      button.addEventListener("click", async () => {
        const pre = button.nextElementSibling;
        if (!pre.dataset.loaded) {
          const response = await fetch(button.dataset.url, { credentials: "same-origin" });
          pre.textContent = response.ok ? await response.text() : `Could not load the prompt (HTTP ${response.status}).`;
          pre.dataset.loaded = "1";
        }
        pre.hidden = !pre.hidden;
        button.textContent = pre.hidden ? "prompt" : "hide prompt";
      });
    }
  }

  function wireGrid() {
    const grid = document.getElementById("traj-grid");
    if (!grid) return;
    const body = grid.tBodies[0];
    const rows = [...body.rows];
    const sort = document.getElementById("sort-rollouts");
    const failure = document.getElementById("filter-failure");
    const minReward = document.getElementById("filter-min-reward");
    const count = document.getElementById("grid-count");
    const reward = (row) => (row.dataset.reward === "" ? -Infinity : Number(row.dataset.reward));

    function apply() {
      const ordered = [...rows];
      if (sort.value === "reward-desc") ordered.sort((a, b) => reward(b) - reward(a) || a.dataset.index - b.dataset.index);
      if (sort.value === "reward-asc") ordered.sort((a, b) => reward(a) - reward(b) || a.dataset.index - b.dataset.index);
      if (sort.value === "index") ordered.sort((a, b) => a.dataset.index - b.dataset.index);
      const floor = minReward.value === "" ? null : Number(minReward.value);
      let shown = 0;
      for (const row of ordered) {
        const failedOk = failure.value === "all" || (failure.value === "failed") === (row.dataset.failed === "1");
        const rewardOk = floor === null || reward(row) >= floor;
        row.hidden = !(failedOk && rewardOk);
        if (!row.hidden) shown += 1;
        body.appendChild(row); // re-appending moves the row: the table takes the new order
      }
      count.textContent = `${shown} of ${rows.length} rollouts`;
      grid.dataset.shown = String(shown);
    }
    for (const control of [sort, failure, minReward]) control.addEventListener("input", apply);
    apply();
  }

  function drawGroupChart() {
    const data = document.getElementById("group-chart");
    const div = document.getElementById("advantage-chart");
    if (!data || !div || !window.Plotly) return;
    const chart = JSON.parse(data.textContent);
    const bar = (name, y, color) => ({ type: "bar", name, x: chart.labels, y, marker: { color } });
    Plotly.newPlot(div, [
      bar("used by the run", chart.used, "#3b5bdb"),
      bar("GRPO on the summed reward", chart.grpo, "#f08c00"),
      bar("GDPO (per-reward normalization)", chart.gdpo, "#2b8a3e"),
    ], {
      title: { text: "Advantage per member", font: { size: 13 } }, barmode: "group", height: 300,
      margin: { l: 50, r: 10, t: 36, b: 70 }, legend: { orientation: "h", y: -0.35 },
      xaxis: { title: { text: "member (position, rollout)" } },
      // Bars start at 0: a group whose advantages are all 0 (no reward variance) gets a readable axis.
      yaxis: { title: { text: "advantage" }, ...window.cohortAxes.axis([0, chart.used, chart.grpo, chart.gdpo]) },
    }, { responsive: true, displaylogo: false });
    div.dataset.drawn = "1";
  }

  window.addEventListener("DOMContentLoaded", () => { wirePrompts(); wireGrid(); drawGroupChart(); });
})();
