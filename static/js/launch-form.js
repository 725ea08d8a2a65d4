// The launch form (templates/runs/new.html) follows the user's choices: a field whose wrapper says
// `data-shown-when='{"strategy": ["mmgrpo"]}'` (RunConfig.field_conditions, trainer/config.py) is hidden
// while its condition fails, and a folded group whose fields are all hidden is hidden too. Hiding only
// changes what is in view: the inputs stay in the form, keep their values (a preset's included), are
// posted and are validated by the server like any other. A field showing an error is never hidden.
// Also: the model picker under the model box fills it with a click, and a field's "sweep" toggle
// reveals its sweep entry (the Sweep button's search space).
(() => {
  const form = document.querySelector("form.launch");
  if (!form) return;

  // The value a condition compares: a field's value, a checkbox as "true" / "false", or (for a
  // "program.<property>" key) the chosen program's <option data-<property>>. null: not on this form,
  // so the condition cannot be judged and the field stays in view.
  function controlValue(key) {
    if (key.startsWith("program.")) {
      const option = form.elements.program?.selectedOptions?.[0];
      const property = key.slice("program.".length).replace(/_([a-z])/g, (_, c) => c.toUpperCase());
      return option ? (option.dataset[property] ?? null) : null;
    }
    const input = form.elements[key];
    if (!input) return null;
    if (input.type === "checkbox") return input.checked ? "true" : "false";
    return input.value;
  }

  const conditional = [...form.querySelectorAll(".field[data-shown-when]")].map((wrapper) => {
    let condition = {};
    try {
      condition = JSON.parse(wrapper.dataset.shownWhen);
    } catch (error) {
      console.error("launch form: bad data-shown-when on", wrapper.id, error); // shown: nothing is lost
    }
    return { wrapper, condition };
  });

  function holds(condition) {
    return Object.entries(condition).every(([key, values]) => {
      const value = controlValue(key);
      return value === null || values.includes(value);
    });
  }

  function applyConditions() {
    for (const { wrapper, condition } of conditional) {
      wrapper.hidden = !wrapper.classList.contains("has-error") && !holds(condition);
    }
    for (const group of form.querySelectorAll("details.group")) {
      const fields = [...group.querySelectorAll(".field")];
      group.hidden = fields.length > 0 && fields.every((field) => field.hidden);
    }
  }

  form.addEventListener("change", applyConditions);
  applyConditions();
  form.dataset.conditionsReady = "true"; // for tests: the first pass is done

  // --- the model picker ----------------------------------------------------------------------
  const picker = document.getElementById("model-picker");
  const modelBox = form.elements.model;
  if (picker && modelBox) {
    const markChosen = () => {
      for (const button of picker.querySelectorAll("button[data-model]")) {
        const chosen = button.dataset.kind === "prefix"
          ? modelBox.value.startsWith(button.dataset.model) : modelBox.value === button.dataset.model;
        button.classList.toggle("active", chosen);
        button.setAttribute("aria-pressed", String(chosen));
      }
    };
    picker.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-model]");
      if (!button) return;
      modelBox.value = button.dataset.model;
      modelBox.dispatchEvent(new Event("input", { bubbles: true }));
      modelBox.dispatchEvent(new Event("change", { bubbles: true }));
      modelBox.focus();
      // A prefix ("Qwen/") is the start of an id: the caret waits at its end for the rest.
      const end = modelBox.value.length;
      modelBox.setSelectionRange(end, end);
      markChosen();
    });
    modelBox.addEventListener("input", markChosen);
    markChosen();
    picker.hidden = false;
  }

  // --- sweep entries (webapp/sweeps, the Sweep button) -----------------------------------------
  // A field's "sweep" toggle reveals its entry (values `a, b` or a range `low..high log`); a toggled-off
  // entry is disabled, so it is not posted and the sweep leaves that field at the form's value.
  const sweepSettings = document.getElementById("sweep-settings");
  for (const entry of form.querySelectorAll(".sweep-entry")) {
    const box = entry.querySelector(".sweep-toggle-box");
    const input = entry.querySelector(".sweep-values");
    const sync = () => {
      entry.classList.toggle("on", box.checked);
      input.disabled = !box.checked;
    };
    box.addEventListener("change", () => {
      sync();
      if (box.checked) {
        if (sweepSettings) sweepSettings.open = true; // what the sweep does with it is set there
        input.focus();
      }
    });
    sync();
  }
  // Enter in a sweep input means the Sweep button (the form's first button would launch one plain run).
  form.addEventListener("keydown", (event) => {
    const sweepButton = document.getElementById("launch-sweep");
    if (event.key !== "Enter" || !sweepButton || event.target.tagName !== "INPUT") return;
    if (!event.target.closest(".sweep-entry, #sweep-settings")) return;
    event.preventDefault();
    sweepButton.click();
  });
  form.dataset.sweepReady = "true"; // for tests: the toggles are wired

  // --- a refused form's summary (templates/runs/_error_summary.html) ---------------------------
  // Each entry links to the input to fix: following it opens the input's folded group and shows it
  // if the choices hid it. On load the first refused input takes the focus, so a form refused 1,000 px
  // down opens on what to fix; the summary at the top (role="alert") is read out and lists the rest.
  function reveal(input) {
    for (let node = input.parentElement; node && node !== form; node = node.parentElement) {
      if (node.tagName === "DETAILS") node.open = true;
      if (node.hidden && (node.tagName === "DETAILS" || node.classList.contains("field"))) node.hidden = false;
    }
  }

  function focusRefused(id) {
    const input = document.getElementById(id);
    if (!input) return false;
    reveal(input);
    const wrapper = input.closest(".field");
    // An input the page keeps out of view (the rewards JSON behind its editor): the field's first control.
    const target = input.getClientRects().length ? input
      : wrapper?.querySelector("input:not([type=hidden]):not(:disabled), select, textarea, button") || input;
    target.focus({ preventScroll: true });
    (wrapper || target).scrollIntoView({ block: "center" });
    return document.activeElement === target;
  }

  const summary = document.getElementById("error-summary");
  if (summary) {
    summary.addEventListener("click", (event) => {
      const link = event.target.closest("a[data-target]");
      if (link && focusRefused(link.dataset.target)) event.preventDefault(); // else the anchor jumps
    });
    // "Launch anyway" with another action's button (e.g. Sweep) confirms through the checkbox.
    const anyway = document.getElementById("launch-anyway");
    anyway?.addEventListener("click", () => {
      const box = anyway.dataset.confirms && document.getElementById(anyway.dataset.confirms);
      if (box) box.checked = true;
    });
    // After the other deferred scripts (the reward editor shows its JSON when it is what was refused).
    const focusFirst = () => {
      const first = summary.querySelector("a[data-target]");
      if (!first || !focusRefused(first.dataset.target)) summary.focus();
      form.dataset.summaryReady = "true"; // for tests: the first refused input has the focus
    };
    if (document.readyState === "complete") focusFirst();
    else window.addEventListener("DOMContentLoaded", focusFirst, { once: true });
  }
})();
