// The run's timeline in the Pipeline section: a lane per process (sampler, trainer, adapter hand-over), a
// bar per span of timeline.json (webapp/runs/charts/timeline.py), hover for its times, a click on a
// generation bar opening the step's rollouts. It follows the newest steps while the run streams (at most
// one read every REDRAW_MS, only while the panel is open and in view) until a window of steps is asked for.
(function () {
  "use strict";

  const REDRAW_MS = 3000;
  const COLORS = { sampler: "#1f77b4", trainer: "#ff7f0e", adapter: "#2ca02c", ingest: "#9467bd", rewards: "#8c564b" };
  const live = JSON.parse(document.getElementById("run-data").textContent);
  const panel = document.getElementById("timeline-panel");
  const div = document.getElementById("timeline");
  const note = document.getElementById("timeline-note");
  const form = document.getElementById("timeline-window");
  if (!panel || !div) return;

  const state = { window: null, pending: false, lastRead: 0, timer: null, inView: false, reading: false };

  function seconds(value) { return `${value.toFixed(value < 10 ? 3 : 1)} s`; }

  function draw(data) {
    div.dataset.spans = String(data.spans.length);
    if (!data.spans.length) {
      note.textContent = data.steps ? "" : "No step has a timeline yet.";
      if (div.data) Plotly.purge(div);
      div.dataset.lanes = "0";
      window.cohortSections?.show();
      return;
    }
    const origin = Math.min(...data.spans.map((s) => s.start));
    const traces = data.lanes.map((lane) => {
      const bars = data.spans.filter((s) => s.lane === lane);
      return {
        type: "bar", orientation: "h", name: lane, y: bars.map(() => lane),
        base: bars.map((s) => s.start - origin), x: bars.map((s) => Math.max(s.end - s.start, 1e-4)),
        customdata: bars.map((s) => [s.step, s.name, seconds(s.start - origin), seconds(s.end - origin),
                                     seconds(s.end - s.start), s.policy_version ?? ""]),
        hovertemplate: "step %{customdata[0]}: %{customdata[1]}<br>%{customdata[2]} to %{customdata[3]}"
          + " (%{customdata[4]})<extra>%{fullData.name}</extra>",
        marker: { color: COLORS[lane] || "#7f7f7f" },
      };
    });
    const layout = {
      barmode: "overlay", height: 90 + 45 * data.lanes.length, margin: { l: 80, r: 20, t: 10, b: 40 },
      xaxis: { title: { text: "seconds from the first bar shown" }, zeroline: false },
      yaxis: { categoryorder: "array", categoryarray: [...data.lanes].reverse() }, showlegend: false,
    };
    div.dataset.lanes = String(data.lanes.length);
    window.cohortSections?.show(); // the Pipeline section shows once its timeline has bars
    Plotly.react(div, traces, layout, { displaylogo: false, responsive: true });
    const [first, last] = data.steps;
    note.textContent = `Steps ${first} to ${last}` + (data.every > 1
      ? `: every ${data.every}th of the window's ${data.window_steps} steps, so the bars fit the page.` : ".");
    if (!div.dataset.clickBound) {
      div.on("plotly_click", (event) => {
        const point = event.points && event.points[0];
        if (!point || point.data.name !== "sampler") return;
        const step = point.customdata[0];
        location.href = live.step_url.replace("/steps/0/", `/steps/${step}/`);
      });
      div.dataset.clickBound = "1";
    }
  }

  async function read() {
    if (state.reading) { state.pending = true; return; }
    state.reading = true;
    state.lastRead = Date.now();
    try {
      const params = new URLSearchParams();
      if (state.window) {
        if (state.window.from !== "") params.set("from_step", state.window.from);
        if (state.window.to !== "") params.set("to_step", state.window.to);
      }
      const response = await fetch(`${live.timeline_url}?${params}`, { headers: { Accept: "application/json" } });
      const data = await response.json();
      if (!response.ok) { note.textContent = data.error || `The timeline could not be read (${response.status}).`; return; }
      draw(data);
    } catch (error) {
      note.textContent = "The timeline could not be read; it is tried again with the next step.";
    } finally {
      state.reading = false;
      if (state.pending) { state.pending = false; if (state.window) read(); else schedule(); }
    }
  }

  function schedule() {
    if (state.window || !panel.open || !state.inView || state.timer) return;
    const wait = Math.max(0, state.lastRead + REDRAW_MS - Date.now());
    state.timer = setTimeout(() => { state.timer = null; read(); }, wait);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    state.window = { from: form.from_step.value, to: form.to_step.value };
    read(); // during a read: right after it
  });
  document.getElementById("timeline-newest").addEventListener("click", () => {
    state.window = null; form.from_step.value = ""; form.to_step.value = ""; read();
  });
  panel.addEventListener("toggle", () => { if (panel.open) read(); });
  new IntersectionObserver((entries) => {
    const wasInView = state.inView;
    state.inView = entries.some((e) => e.isIntersecting);
    if (state.inView && !wasInView) {
      if (div.data) Plotly.Plots.resize(div); // drawn while its section was still hidden, at no width
      schedule();
    }
  }).observe(panel);

  window.cohortTimeline = { stepStored: schedule, read };
  read();
})();
