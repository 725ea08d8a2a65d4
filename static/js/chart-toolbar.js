// The chart toolbar above a page's managed charts (chart-controls.js): smoothing, log y, and the x
// axis by step / wall time / tokens seen. A change redraws every chart from its model
// (chart-traces.js) and is stored per user and page in the "charts" preference (prefs.js).
(function () {
  "use strict";

  const cv = window.cohortChartView;
  const page = cv.page;

  function build(bar) {
    bar.innerHTML = `
      <label class="tool">Smoothing <input type="range" id="cc-smoothing" min="0" max="0.99" step="0.01" value="0">
        <output id="cc-smoothing-value">off</output></label>
      <label class="tool check"><input type="checkbox" id="cc-log"> Log scale (y)</label>
      <label class="tool">X axis <select id="cc-x">
        ${Object.entries(cv.X_MODES).map(([k, v]) => `<option value="${k}">${v}</option>`).join("")}</select></label>
      <span class="muted small" id="cc-note"></span>`;
    const smoothing = bar.querySelector("#cc-smoothing");
    smoothing.addEventListener("change", () => setView({ smoothing: Number(smoothing.value) }));
    // The curve follows the slider while it moves (input), the choice is stored when it is let go.
    smoothing.addEventListener("input", () => setView({ smoothing: Number(smoothing.value) }, { save: false }));
    bar.querySelector("#cc-log").addEventListener("change", (e) => setView({ log: e.target.checked }));
    bar.querySelector("#cc-x").addEventListener("change", (e) => setView({ x: e.target.value }));
  }

  function show() {
    const v = page.view;
    const slider = document.getElementById("cc-smoothing");
    if (!slider) return;
    if (document.activeElement !== slider) slider.value = String(v.smoothing);
    document.getElementById("cc-smoothing-value").textContent = v.smoothing > 0 ? Number(slider.value).toFixed(2) : "off";
    document.getElementById("cc-log").checked = v.log;
    const select = document.getElementById("cc-x");
    select.value = v.x;
    const tokens = select.querySelector("option[value=tokens]");
    tokens.disabled = !cv.hasTokens();
    tokens.title = tokens.disabled ? "This run reports no completion_tokens" : "";
  }

  async function setView(change, { save = true } = {}) {
    Object.assign(page.view, change);
    if (page.view.x === "tokens" && !cv.hasTokens()) page.view.x = "step";
    show();
    window.cohortChartTraces.renderAll();
    if (save) {
      const stored = (await window.cohortPrefs.load("charts")) || {};
      stored[page.name] = { ...page.view };
      window.cohortPrefs.save("charts", stored);
    }
  }

  // The page's part of the stored "charts" preference, checked, as the view to start from.
  function restore(mine) {
    if (!mine) return;
    page.view.smoothing = Math.min(Math.max(Number(mine.smoothing) || 0, 0), 0.99);
    page.view.log = mine.log === true;
    page.view.x = cv.X_MODES[mine.x] ? mine.x : "step";
  }

  window.cohortChartToolbar = { build, show, setView, restore };
})();
