// The launch form (templates/runs/new.html) follows the user's choices: a field whose wrapper says
// `data-shown-when='{"strategy": ["mmgrpo"]}'` (RunConfig.field_conditions, trainer/config.py) is hidden
// while its condition fails, and a folded group whose fields are all hidden is hidden too. Hiding only
// changes what is in view: the inputs stay in the form, keep their values (a preset's included), are
// posted and are validated by the server like any other. A field showing an error is never hidden.
// Also: the model picker under the model box fills it with a click.
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
})();
