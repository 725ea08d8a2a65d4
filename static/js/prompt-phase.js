// Phase 1 of a run that optimizes prompts first (templates/runs/_prompt_phase.html): the phase marker,
// every trial's score on a chart, and the instructions and demos chosen per module. The run page
// calls render() with the server's record on load and with each `prompts` notice of the websocket.
(() => {
  const PHASES = {
    "": "phase 1 of 2: waiting to start",
    prompts: "phase 1 of 2: optimizing prompts",
    weights: "phase 2 of 2: training weights",
  };
  const OPTIMIZERS = { mipro_light: "MIPROv2 (light)", mipro_medium: "MIPROv2 (medium)", gepa: "GEPA",
                       bootstrap_rs: "BootstrapFewShotWithRandomSearch" };

  function text(tag, value, className) {
    const node = document.createElement(tag);
    node.textContent = value;
    if (className) node.className = className;
    return node;
  }

  function drawTrials(trials) {
    const chart = document.getElementById("prompt-trials-chart");
    chart.dataset.points = String(trials.length);
    if (!trials.length || !window.Plotly) { chart.hidden = !trials.length; return; }
    chart.hidden = false;
    const scores = trials.map((t) => t.score);
    const best = [];
    scores.reduce((top, s) => { const next = Math.max(top, s); best.push(next); return next; }, -Infinity);
    const numbers = trials.map((t) => t.trial);
    Plotly.react(chart, [
      { x: numbers, y: scores, mode: "markers", name: "trial score", marker: { size: 8 } },
      { x: numbers, y: best, mode: "lines", name: "best so far", line: { shape: "hv" } },
    ], {
      height: 240, margin: { t: 24, r: 16, b: 40, l: 48 }, title: { text: "Score of each trial (dev set)", font: { size: 13 } },
      // Equal scores, or a single trial, still get readable axes (axes.js).
      xaxis: { title: { text: "trial" }, dtick: 1, ...window.cohortAxes.axis(numbers, { integer: true }) },
      yaxis: { title: { text: "score" }, ...window.cohortAxes.axis(scores) },
      legend: { orientation: "h", y: -0.3 },
    }, { displayModeBar: false, responsive: true });
  }

  function drawModules(modules) {
    const box = document.getElementById("prompt-modules");
    box.replaceChildren();
    const names = Object.keys(modules || {});
    if (!names.length) return;
    box.append(text("h3", "Chosen prompts"));
    for (const name of names) {
      const module = modules[name];
      const card = document.createElement("div");
      card.className = "prompt-module";
      card.dataset.module = name;
      card.append(text("h4", name), text("pre", module.instructions || "(no instructions)", "prompt-instructions"));
      if ((module.demos || []).length) {
        const list = document.createElement("ol");
        list.className = "prompt-demos";
        for (const demo of module.demos) {
          list.append(text("li", Object.entries(demo).filter(([k]) => k !== "id")
            .map(([k, v]) => `${k}: ${v}`).join(" · ")));
        }
        card.append(text("p", `${module.demos.length} demo(s):`, "muted"), list);
      } else {
        card.append(text("p", "No demos.", "muted"));
      }
      box.append(card);
    }
  }

  function render(record) {
    if (!document.getElementById("prompt-phase")) return;
    const phase = record.phase || "";
    document.getElementById("prompt-phase-marker").textContent = PHASES[phase] || phase;
    document.getElementById("prompt-phase-marker").className = `badge phase-${phase || "waiting"}`;
    const trials = record.trials || [];
    const best = trials.length ? Math.max(...trials.map((t) => t.score)) : null;
    const optimizer = OPTIMIZERS[record.optimizer] || record.optimizer || "";
    document.getElementById("prompt-phase-note").textContent = [
      optimizer && `${optimizer}${record.model ? ` proposing with ${record.model}` : ""}`,
      `${trials.length} trial(s)`, best !== null ? `best ${best.toFixed(1)}` : "",
    ].filter(Boolean).join(" · ");
    drawTrials(trials);
    drawModules(record.modules);
  }

  window.cohortPromptPhase = { render };
  window.addEventListener("DOMContentLoaded", () => {
    const data = document.getElementById("prompt-phase-data");
    if (data) render(JSON.parse(data.textContent));
  });
})();
