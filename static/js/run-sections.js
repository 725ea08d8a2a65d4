// The run page's chart sections (templates/runs/detail.html, webapp/runs/views.py CHART_SECTIONS):
// where each chart sits, sections that fold, charts pinned to the top, and the Groups section's
// heatmaps. The fold state and the pins are one preference per user for every run ("run-layout":
// {sections: {key: open}, pinned: [family, ...]}, prefs.js). A chart goes to
// the pinned strip when pinned, to its section's strip of small charts while every value is 0 (its
// data-compact, set by chart-traces.js), to its section's grid otherwise.
(function () {
  "use strict";

  const cc = window.cohortCharts;
  const layout = { sections: {}, pinned: [] }; // {section: open}, pinned families in pin order
  let rankOf = () => 0; // family -> display order within a section (run-charts.js's FAMILIES)

  function place(div) {
    const section = div.dataset.section;
    const pinned = layout.pinned.includes(div.dataset.family);
    const compact = div.dataset.compact === "true";
    const container = document.getElementById(pinned ? "charts-pinned" : compact ? `flat-${section}` : `charts-${section}`);
    const order = (el) => (pinned ? layout.pinned.indexOf(el.dataset.family) : rankOf(el.dataset.family));
    const after = [...container.children].find((el) => el !== div && order(el) > order(div));
    if (div.parentElement !== container || div.nextElementSibling !== (after || null)) {
      container.insertBefore(div, after || null);
      cc.refit(div);
    }
    show();
  }

  // A section shows once it has a chart; its heading counts the charts drawn small.
  function show() {
    for (const el of document.querySelectorAll(".chart-section[data-section]")) {
      const key = el.dataset.section;
      const grid = document.getElementById(`charts-${key}`), flat = document.getElementById(`flat-${key}`);
      const heatmaps = key === "groups" ? document.getElementById("heatmaps").children.length : 0;
      // A run trained elsewhere may log timeline bars (run.log_span) and no pipeline metric.
      const timeline = key === "pipeline" ? Number(document.getElementById("timeline")?.dataset.lanes || 0) : 0;
      el.hidden = grid.children.length + flat.children.length + heatmaps + timeline === 0;
      const n = flat.children.length;
      el.querySelector(".section-flat-count").textContent = n ? `· ${n} chart${n > 1 ? "s" : ""} at 0 on every step, drawn small` : "";
    }
    document.getElementById("section-pinned").hidden = document.getElementById("charts-pinned").children.length === 0;
  }

  function pin(div, pinned) {
    const family = div.dataset.family;
    layout.pinned = layout.pinned.filter((f) => f !== family);
    if (pinned) layout.pinned.push(family);
    place(div);
    if (pinned) document.getElementById("section-pinned").scrollIntoView({ block: "nearest" });
    window.cohortPrefs.save("run-layout", layout);
  }

  // The user's layout, applied before the first chart is drawn; folding is remembered from then on.
  async function load() {
    const stored = await window.cohortPrefs.load("run-layout");
    if (stored) {
      layout.sections = stored.sections && typeof stored.sections === "object" ? { ...stored.sections } : {};
      layout.pinned = Array.isArray(stored.pinned) ? stored.pinned.filter((f) => typeof f === "string") : [];
    }
    for (const el of document.querySelectorAll(".chart-section[data-section]")) {
      const key = el.dataset.section;
      if (layout.sections[key] === false) el.open = false;
      el.addEventListener("toggle", () => {
        // A chart drawn while its section was folded has no width of its own: draw it at the section's.
        if (el.open) for (const div of el.querySelectorAll(".managed-chart")) cc.refit(div);
        if (el.open) for (const div of el.querySelectorAll("#heatmaps .chart")) Plotly.relayout(div, { width: null, autosize: true });
        if ((layout.sections[key] !== false) === el.open) return; // the state it was loaded in
        layout.sections[key] = el.open;
        window.cohortPrefs.save("run-layout", layout);
      });
    }
    document.getElementById("charts").dataset.layoutReady = "1";
  }

  // Heatmaps of per-module group variance and zero-variance share over steps (binned server-side).
  // Zero-variance share: white (every group carries signal) to red (none does).
  const HEATMAPS = [["group_var", "Viridis"], ["zero_var_share", [[0, "#f8f9fb"], [1, "#c92a2a"]]]];
  async function loadHeatmaps(url, openStep) {
    for (const [family, colorscale] of HEATMAPS) {
      try {
        const response = await fetch(`${url}?family=${family}`, { credentials: "same-origin" });
        if (!response.ok) continue;
        const data = await response.json();
        if (!data.modules.length) continue;
        let div = document.getElementById(`heatmap-${family}`);
        if (!div) {
          div = document.createElement("div");
          div.id = `heatmap-${family}`;
          div.className = "chart";
          document.getElementById("heatmaps").appendChild(div);
          Plotly.newPlot(div, [], {}, { responsive: true, displaylogo: false });
          div.on("plotly_click", (event) => openStep(event.points && event.points[0] && event.points[0].x));
        }
        const binned = data.bin > 1 ? ` (mean over ${data.bin} steps per column)` : "";
        // The share's scale is fixed (0 to 1); a variance that is the same everywhere gets a readable one.
        const share = family === "zero_var_share";
        const zRange = share ? { zmin: 0, zmax: 1 } : window.cohortAxes.colorRange(data.z, { floor: 0 });
        Plotly.react(div, [{ type: "heatmap", x: data.x, y: data.modules, z: data.z, colorscale, hoverongaps: false,
                             ...zRange, colorbar: { thickness: 12, tickformat: "~g" } }], {
          title: { text: data.title + binned, font: { size: 13 } }, height: Math.max(260, 120 + 28 * data.modules.length),
          margin: { l: 110, r: 10, t: 36, b: 40 }, uirevision: "keep",
          xaxis: { title: { text: "step" }, ...window.cohortAxes.axis(data.x, { integer: data.bin <= 1 }) },
        }, { responsive: true, displaylogo: false });
        show();
        div.dataset.modules = String(data.modules.length);
        div.dataset.columns = String(data.x.length);
      } catch (err) {
        /* the next notice tries again */
      }
    }
  }

  window.cohortSections = {
    load, place, show, pin, loadHeatmaps,
    isPinned: (family) => layout.pinned.includes(family),
    setOrder: (fn) => { rankOf = fn; },
  };
})();
