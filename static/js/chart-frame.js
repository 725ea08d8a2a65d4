// What every managed chart has around its plot (chart-controls.js): hover synced across the page's
// charts, and its buttons (full width; pin to the top where the page offers it).
(function () {
  "use strict";

  let syncing = false; // a synced hover fires hover events on the other charts: do not echo them

  // Hovering x on one chart shows x on every other chart of the page.
  function syncHover(charts, chart, event) {
    if (syncing || !event.points || !event.points.length) return;
    const x = event.xvals && event.xvals.length ? event.xvals[0] : event.points[0].x;
    syncing = true;
    try {
      for (const other of charts) {
        if (other === chart || !other.div.data || !other.div.data.length) continue;
        Plotly.Fx.hover(other.div, { xval: x }, "xy");
      }
    } finally {
      syncing = false;
    }
  }

  function syncUnhover(charts, chart) {
    if (syncing) return;
    syncing = true;
    try {
      for (const other of charts) if (other !== chart) Plotly.Fx.unhover(other.div);
    } finally {
      syncing = false;
    }
  }

  function addButton(div, className, text, title, onClick) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = className;
    button.title = title;
    button.setAttribute("aria-label", title);
    button.textContent = text;
    button.addEventListener("click", onClick);
    div.appendChild(button);
    return button;
  }

  // Pin to the top: the page decides where a pinned chart goes and remembers it (onPin(pinned)).
  function addPin(div, pinned, onPin) {
    const button = addButton(div, "chart-pin", "", "", () => setPinned(div, !div.classList.contains("chart-pinned"), onPin));
    setPinned(div, pinned, null);
    return button;
  }

  function setPinned(div, pinned, onPin) {
    const button = div.querySelector(".chart-pin");
    div.classList.toggle("chart-pinned", pinned);
    div.dataset.pinned = String(pinned);
    button.title = pinned ? "Unpin (back to its section)" : "Pin to the top of the page";
    button.setAttribute("aria-label", button.title);
    button.setAttribute("aria-pressed", String(pinned));
    button.textContent = pinned ? "Unpin" : "Pin";
    if (onPin) onPin(pinned);
  }

  window.cohortChartFrame = { syncHover, syncUnhover, addButton, addPin };
})();
