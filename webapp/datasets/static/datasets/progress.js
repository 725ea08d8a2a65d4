// Dataset page: while an import is queued or running, poll its progress.json and move the bar;
// when it ends, reload once so the page shows the final counts and the errors with line numbers.
(function () {
  const box = document.getElementById("dataset-import");
  if (!box || box.dataset.active !== "true") return;
  const url = box.dataset.progressUrl;
  const bar = document.getElementById("dataset-progress");
  const pct = document.getElementById("dataset-progress-pct");
  const status = document.getElementById("dataset-status");
  const note = document.getElementById("dataset-note");

  async function poll() {
    try {
      const response = await fetch(url, {headers: {"Accept": "application/json"}, credentials: "same-origin"});
      if (response.ok) {
        const state = await response.json();
        bar.value = state.progress;
        pct.textContent = state.progress + "%";
        status.textContent = state.status;
        note.textContent = state.note;
        box.dataset.polls = String(Number(box.dataset.polls || 0) + 1);
        if (!state.active) {
          window.location.reload();
          return;
        }
      }
    } catch (error) {
      // A network hiccup: try again at the next tick.
    }
    window.setTimeout(poll, 700);
  }
  window.setTimeout(poll, 300);
})();
