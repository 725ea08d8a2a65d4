// Tables sorted in the browser by a click on a column's name (`table.sortable`, e.g. the step page's
// forks): a header `th[data-sort=number|text]` holds a button; each cell of the column gives its value
// in data-value ('' for none: last whichever the direction). The first click sorts numbers high first
// and text A to Z, the next one reverses; ties keep the server's order. aria-sort says which is active.
(function () {
  "use strict";

  function wire(table) {
    const body = table.tBodies[0];
    const rows = [...body.rows];
    rows.forEach((row, i) => { row.dataset.order = String(i); });
    const headers = [...table.querySelectorAll("th[data-sort]")];
    for (const th of headers) {
      th.querySelector("button").addEventListener("click", () => {
        const numeric = th.dataset.sort === "number";
        const current = th.getAttribute("aria-sort");
        const direction = current === "descending" ? "ascending"
          : current === "ascending" ? "descending" : numeric ? "descending" : "ascending";
        for (const other of headers) other.removeAttribute("aria-sort");
        th.setAttribute("aria-sort", direction);
        const column = th.cellIndex;
        const sign = direction === "ascending" ? 1 : -1;
        const value = (row) => row.cells[column].dataset.value ?? "";
        rows.sort((a, b) => {
          const va = value(a), vb = value(b);
          if ((va === "") !== (vb === "")) return va === "" ? 1 : -1;
          const order = numeric ? Number(va) - Number(vb) : va.localeCompare(vb, undefined, { numeric: true });
          return sign * order || a.dataset.order - b.dataset.order;
        });
        body.append(...rows); // appending moves each row: the table takes the new order
        table.dataset.sorted = `${th.dataset.key}-${direction}`;
      });
    }
  }

  window.addEventListener("DOMContentLoaded", () => {
    for (const table of document.querySelectorAll("table.sortable")) wire(table);
  });
})();
