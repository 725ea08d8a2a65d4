// Live charts of one run. The database is the source of truth: the page loads every stored series
// over HTTP (metrics.json?max_points=N: a long series comes downsampled on the server, spikes and
// both ends kept), then extends its traces from websocket notices. A notice whose seq is not the
// next one, a reconnect, or a quiet socket while the run is active all lead back to HTTP from the
// last seq seen (metrics.json?after=<seq>), so a dropped notice or a restarted Redis never loses a
// point. This file keeps the data coming and starts the page. Which chart a metric goes to, drawing
// points there, zooming and the step -> (wall time, tokens seen) table are run-charts.js's
// (window.cohortRunCharts); the state badge, best reward, status line and alerts run-status.js's;
// where a chart sits (sections, pins, small flat charts) and the heatmaps run-sections.js's; drawing
// (smoothing, log y, the x axis, hover sync, legend memory, full width) chart-controls.js's.
(function () {
  "use strict";

  const live = JSON.parse(document.getElementById("run-data").textContent);
  const ACTIVE = new Set(["queued", "running", "cancelling"]);
  const QUIET_MS = 10000; // an active run with no notice for this long is checked over HTTP
  const MAX_POINTS = live.max_points || 2000; // points per trace the server sends at most
  const HEATMAP_EVERY_MS = 15000;
  const cc = window.cohortCharts;
  const sections = window.cohortSections; // run-sections.js: where each chart sits, folding, pins, heatmaps
  const charts = window.cohortRunCharts; // run-charts.js: the charts and the points drawn on them
  const status = window.cohortRunStatus; // run-status.js: the summary, the status line, alerts
  const say = status.say;

  charts.configure(live, MAX_POINTS);

  const state = {
    lastSeq: 0,
    attempt: live.attempt,
    runState: live.state,
    charts: charts.state.charts, // family -> {div, keys: Map(series -> metric key), downsampled, zoomed}
    socket: null,
    retryMs: 1000,
    fetching: null,
    lastNoticeAt: Date.now(),
    stateSince: 0, // when the state shown was learned: an HTTP answer asked for before it must not undo it
    fetchAgain: false,
    closedForGood: false,
    heatmapAt: 0,
    axes: charts.state.axes, // step -> {t: seconds since the first stored step, tokens: completion tokens seen}
    get clock() { return charts.state.clock; }, // {t, at}: the server's seconds-since-first-step at a local time
    get hasTokens() { return charts.state.hasTokens; },
  };
  window.cohortRun = state; // read by the browser tests and handy in the console

  // askedAt: when the HTTP request that carries this state was sent (a notice: now). A request sent
  // before a status notice arrived can answer after it with the state from before; it is ignored.
  function showState(runState, currentStep, askedAt = Date.now()) {
    if (askedAt < state.stateSince) return;
    state.stateSince = askedAt;
    const was = state.runState;
    state.runState = runState;
    status.showState(runState, currentStep);
    if (was !== runState) sayLive();
  }

  // "Live." only while the run can still change and the socket is open; a finished run (on its page
  // or a share page) says nothing of the kind.
  function sayLive() {
    const open = state.socket && state.socket.readyState === WebSocket.OPEN;
    const shown = document.getElementById("live-status")?.textContent || "";
    if (open && ACTIVE.has(state.runState)) say("Live.");
    else if (shown === "Live.") say("");
  }

  function reset() {
    charts.reset();
    state.lastSeq = 0;
    state.heatmapAt = 0;
  }

  // Points arrive one notice at a time, up to tens a second; they are taken at once (lastSeq, so a
  // gap is seen) and handed to the charts and the summary together, at most once every
  // TAKE_EVERY_MS: a fast run costs the page one update a second, not one per step.
  const TAKE_EVERY_MS = 1000;
  const waiting = [];
  let takeTimer = null;
  let lastTakeAt = 0;

  function accept(points) {
    if (!points.length) return;
    state.lastSeq = Math.max(state.lastSeq, points[points.length - 1].seq);
    waiting.push(...points);
    if (takeTimer !== null) return;
    takeTimer = setTimeout(take, Math.max(0, lastTakeAt + TAKE_EVERY_MS - Date.now()));
  }

  function take() {
    takeTimer = null;
    lastTakeAt = Date.now();
    const points = waiting.splice(0);
    if (!points.length) return;
    // A resumed run re-does the steps after its checkpoint; those rows were replaced: redraw all.
    let attempt = state.attempt;
    for (const p of points) attempt = Math.max(attempt, p.attempt);
    if (attempt > state.attempt) {
      state.attempt = attempt;
      reset();
      loadOverview().then(refetch);
      return;
    }
    const outgrown = charts.plot(points);
    status.showStep(points[points.length - 1].step);
    let best = -Infinity;
    for (const p of points) best = Math.max(best, p.metrics["reward/mean"] ?? -Infinity);
    status.showBest(best);
    if (outgrown) rethin();
    if (Date.now() - state.heatmapAt > HEATMAP_EVERY_MS) loadHeatmaps();
  }

  // Live points only add to a trace; once one holds twice what the server sends, the overview is
  // loaded again (thinned on the server, spikes kept), so a chart stays about MAX_POINTS long
  // through a run of any length.
  let rethinning = null;
  function rethin() {
    if (rethinning) return;
    rethinning = loadOverview({ always: true }).finally(() => { rethinning = null; });
  }

  // The first load: every series, downsampled on the server when longer than MAX_POINTS.
  async function loadOverview({ always = false } = {}) {
    try {
      const askedAt = Date.now();
      const response = await fetch(`${live.metrics_url}?max_points=${MAX_POINTS}`, { credentials: "same-origin" });
      if (!response.ok) { say(`Could not load metrics (HTTP ${response.status}); retrying.`); return; }
      const page = await response.json();
      charts.absorbAxes(page.axes);
      if (page.last_seq > state.lastSeq || (always && page.last_seq >= state.lastSeq)) {
        state.attempt = Math.max(state.attempt, page.attempt);
        charts.drawSeries(page.series);
        state.lastSeq = page.last_seq;
      }
      showState(page.state, page.current_step, askedAt);
      status.showBest(page.best_reward);
    } catch (err) {
      say("Could not load metrics; retrying.");
    }
  }

  function loadHeatmaps() {
    state.heatmapAt = Date.now();
    return sections.loadHeatmaps(live.heatmap_url, charts.openStep);
  }

  // Loads every stored point after the last seq seen; concurrent callers share one request chain,
  // which asks once more when a caller came after its last request was sent (a status notice: the
  // run's final steps may have been stored after that request).
  function refetch() {
    if (state.fetching) { state.fetchAgain = true; return state.fetching; }
    state.fetching = (async () => {
      const before = state.lastSeq;
      try {
        for (;;) {
          state.fetchAgain = false;
          const askedAt = Date.now();
          const response = await fetch(`${live.metrics_url}?after=${state.lastSeq}`, { credentials: "same-origin" });
          if (!response.ok) { say(`Could not load metrics (HTTP ${response.status}); retrying.`); return false; }
          const page = await response.json();
          charts.absorbAxes(page.axes);
          accept(page.points.filter((p) => p.seq > state.lastSeq));
          showState(page.state, page.current_step, askedAt);
          status.showBest(page.best_reward);
          if (page.complete && !state.fetchAgain) return state.lastSeq > before;
        }
      } catch (err) {
        say("Could not load metrics; retrying.");
        return false;
      } finally {
        state.fetching = null;
      }
    })();
    return state.fetching;
  }

  function onNotice(notice) {
    state.lastNoticeAt = Date.now();
    if (notice.type === "step") {
      window.cohortTimeline?.stepStored(); // run-timeline.js: redrawn at most every few seconds, when open
      if (notice.seq <= state.lastSeq) return; // already drawn (a refetch got there first)
      if (notice.seq === state.lastSeq + 1 && !state.fetching) accept([notice]);
      else refetch(); // a gap: notices were dropped
    } else if (notice.type === "status") {
      showState(notice.state, notice.current_step);
      status.showError(notice.error);
      status.showPrunedReason(notice.pruned_reason);
      refetch().then(loadHeatmaps); // the final steps may have been shipped after the last notice we saw
    } else if (notice.type === "prompts") {
      window.cohortPromptPhase?.render(notice);
    } else if (notice.type === "alert") {
      status.showAlert(notice);
      status.showAlertBadge(notice.badge);
    } else if (notice.type === "slurm") {
      showSlurm(notice);
    }
  }

  // The Slurm job panel (templates/scheduling/_slurm_job.html): Slurm's words as the tick read them.
  function showSlurm(notice) {
    const put = (id, text) => { const el = document.getElementById(id); if (el) el.textContent = text || "—"; };
    put("slurm-job-id", notice.job_id || "not submitted yet");
    put("slurm-state", notice.state);
    put("slurm-reason", notice.reason);
    put("slurm-nodes", notice.nodes);
    put("slurm-restarts", `${notice.restarts} time${notice.restarts === 1 ? "" : "s"}`);
    const message = document.getElementById("slurm-message");
    if (message) { message.textContent = notice.message || ""; message.hidden = !notice.message; }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + live.socket_path);
    state.socket = socket;
    socket.onopen = () => { state.retryMs = 1000; sayLive(); refetch(); };
    socket.onmessage = (event) => onNotice(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (state.socket !== socket) return;
      if (event.code === 4401) { say("Your session ended: log in again to keep watching."); state.closedForGood = true; return; }
      if (event.code === 4404) { say("This run is not visible to you."); state.closedForGood = true; return; }
      say(`Connection lost; reconnecting in ${Math.round(state.retryMs / 1000)} s.`);
      setTimeout(connect, state.retryMs);
      state.retryMs = Math.min(state.retryMs * 2, 15000);
    };
  }

  // A socket can stay open while its notices stop (e.g. Redis restarted and forgot the group):
  // an active run that has been quiet is checked over HTTP, and if points were missed the socket
  // is reopened, which joins the group again.
  setInterval(async () => {
    if (state.closedForGood || !ACTIVE.has(state.runState) || Date.now() - state.lastNoticeAt < QUIET_MS) return;
    state.lastNoticeAt = Date.now();
    const missed = await refetch();
    if (missed && state.socket && state.socket.readyState === WebSocket.OPEN) state.socket.close();
  }, 2000);

  window.addEventListener("DOMContentLoaded", async () => {
    document.getElementById("step-jump")?.addEventListener("submit", (event) => {
      event.preventDefault();
      charts.openStep(parseInt(event.target.step.value, 10) || 1);
    });
    cc.init("run", document.getElementById("chart-toolbar"));
    cc.setLookup(charts.lookup, charts.hasTokens);
    sections.setOrder((family) => charts.familyInfo(family).rank);
    await Promise.all([cc.ready, sections.load()]); // the user's stored settings, legend and layout apply to the first draw
    await loadOverview();
    loadHeatmaps();
    refetch();
    connect();
  });
})();
