// The runs table: "select all" for the page's rows, the selection count, the project switcher, and one
// inline editor for the name, tags and notes of any row (without JavaScript, a row's "edit" link opens
// the edit page).
(function () {
  "use strict";
  function boxes() { return Array.from(document.querySelectorAll("#runs-table tbody input[name=runs]")); }

  function updateSelection() {
    const ticked = boxes().filter((b) => b.checked);
    const chosen = ticked.length;
    const count = document.getElementById("selection-count");
    // A selection holding a run the reader may not change: archive and delete would answer 403, so they are off.
    const refused = ticked.filter((b) => b.closest("tr")?.dataset.changeable === "0").length;
    document.querySelectorAll("#compare-runs .change-action").forEach((button) => {
      button.disabled = refused > 0;
      button.title = refused ? `You may not change ${refused} of the selected runs (not yours, or you are a viewer there)` : "";
    });
    if (count) count.textContent = chosen ? `${chosen} selected` : (count.dataset.idle || "Tick runs to compare them.");
    const all = document.getElementById("select-all");
    if (all) {
      all.checked = chosen > 0 && chosen === boxes().length;
      all.indeterminate = chosen > 0 && chosen < boxes().length;
    }
  }

  function openEditor(link) {
    const editor = document.getElementById("row-editor");
    const row = link.closest("tr");
    if (!editor || !row) return false;
    editor.action = link.pathname;
    editor.querySelector("[name=name]").value = row.dataset.name || "";
    editor.querySelector("[name=tags]").value = row.dataset.tags || "";
    editor.querySelector("[name=notes]").value = row.dataset.notes || "";
    editor.dataset.run = row.dataset.run;
    const cell = link.closest("td");
    const box = cell.getBoundingClientRect();
    editor.style.top = `${window.scrollY + box.bottom + 2}px`;
    editor.style.left = `${window.scrollX + box.left}px`;
    editor.hidden = false;
    editor.querySelector("[name=name]").focus();
    return true;
  }

  function closeEditor() {
    const editor = document.getElementById("row-editor");
    if (editor) editor.hidden = true;
  }

  document.addEventListener("DOMContentLoaded", function () {
    const all = document.getElementById("select-all");
    if (all) {
      all.addEventListener("change", () => { boxes().forEach((b) => { b.checked = all.checked; }); updateSelection(); });
      boxes().forEach((b) => b.addEventListener("change", updateSelection));
      updateSelection();
    }
    document.querySelectorAll("#runs-table a.row-edit-link").forEach((link) => {
      link.addEventListener("click", (event) => { if (openEditor(link)) event.preventDefault(); });
    });
    // The project switcher shows the chosen project's runs at once (the Filter button does it without JS).
    const switcher = document.getElementById("project-switcher");
    if (switcher) switcher.addEventListener("change", () => switcher.form.submit());
    const close = document.getElementById("row-editor-close");
    if (close) close.addEventListener("click", closeEditor);
    document.addEventListener("keydown", (event) => { if (event.key === "Escape") closeEditor(); });
  });
})();
