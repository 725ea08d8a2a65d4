// What the run page (run-live.js) says about the run outside its charts: the state badge and the
// buttons it allows, the current step, the best reward so far, the live-status line, and alerts that
// fire while the page is open (the run's alerts panel and the topbar's badge).
(function () {
  "use strict";

  function showState(runState, currentStep) {
    const badge = document.getElementById("run-state");
    badge.textContent = runState;
    badge.className = "state state-" + runState;
    // A run trained elsewhere has neither form: Cohort cannot stop or resume it.
    const cancel = document.getElementById("cancel-form");
    if (cancel) cancel.hidden = !["queued", "running", "interrupted"].includes(runState);
    const resume = document.getElementById("resume-form");
    if (resume) resume.hidden = !["interrupted", "failed"].includes(runState);
    const lost = document.getElementById("lost-note");  // a run trained elsewhere whose trainer went silent
    if (lost) lost.hidden = runState !== "lost";
    const pruned = document.getElementById("pruned-note");  // stopped by its sweep's pruner
    if (pruned) pruned.hidden = runState !== "pruned";
    if (currentStep !== undefined && currentStep !== null) document.getElementById("run-step").textContent = currentStep;
    // "Run N is queued." was true when the page loaded; once the run moved on it would mislead.
    if (runState !== "queued") document.querySelectorAll(".messages li.run-queued").forEach((li) => li.remove());
  }

  function showStep(step) { document.getElementById("run-step").textContent = step; }

  function showError(text) { document.getElementById("run-error").textContent = text || ""; }

  function showPrunedReason(text) { if (text) document.getElementById("pruned-reason").textContent = text; }

  // The summary's best reward (the best step mean so far), raised as better steps arrive.
  function showBest(value) {
    if (typeof value !== "number" || !Number.isFinite(value)) return;
    const cell = document.getElementById("run-best");
    const shown = Number.parseFloat(cell.dataset.value ?? cell.textContent);
    if (Number.isFinite(shown) && shown >= value) return;
    cell.dataset.value = String(value);
    cell.textContent = value.toFixed(3);
  }

  function say(text) { document.getElementById("live-status").textContent = text; }

  // The topbar's count of the viewer's unseen open alerts (templates/base.html), as the server counted it.
  function showAlertBadge(count) {
    const link = document.getElementById("alerts-link");
    if (!link) return;
    let badge = document.getElementById("alert-badge");
    if (!count) { badge?.remove(); return; }
    if (!badge) {
      badge = document.createElement("span");
      badge.id = "alert-badge";
      badge.className = "badge bad alert-badge";
      badge.title = "unseen open alerts";
      link.append(" ", badge);
    }
    badge.textContent = String(count);
  }

  // A fired alert, as a new first row of the run's alerts panel (templates/alerts/run_panel.html).
  function showAlert(notice) {
    const panel = document.getElementById("alerts");
    if (!panel || document.querySelector(`#run-alerts tr[data-alert="${notice.alert}"]`)) return;
    let table = document.getElementById("run-alerts");
    if (!table) {
      table = document.createElement("table");
      table.id = "run-alerts";
      table.className = "table compact";
      const head = table.createTHead().insertRow();
      for (const title of ["Fired", "Kind", "Step", "Message", "Status"]) {
        const th = document.createElement("th");
        th.textContent = title;
        head.append(th);
      }
      table.createTBody();
      const empty = document.getElementById("no-alerts");
      if (empty) empty.replaceWith(table); else panel.querySelector("h2").after(table);
    }
    const row = table.tBodies[0].insertRow(0);
    row.className = `alert-row alert-${notice.kind} open live-new`;
    row.dataset.alert = String(notice.alert);
    const kind = document.createElement("span");
    kind.className = "badge alert-kind bad";
    kind.textContent = notice.kind_label;
    const cells = [notice.fired_at_text, kind, notice.step ?? "—", notice.message, "open"];
    for (const value of cells) {
      const cell = row.insertCell();
      if (value instanceof Node) cell.append(value); else cell.textContent = String(value);
    }
  }

  window.cohortRunStatus = { showState, showStep, showError, showPrunedReason, showBest, say, showAlert, showAlertBadge };
})();
