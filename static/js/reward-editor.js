// The launch form's reward editor (templates/runs/_reward_editor.html): one row per reward of the run,
// with its name (from the server's reward registry: built-ins and plugins), weight, parameters and GDPO
// condition (Eq. 8: the reward counts only where another reward reaches a threshold). The `rewards`
// textarea stays what is posted: every edit rewrites its JSON, and "Edit as JSON" shows it for power
// users, whose edits rebuild the rows. Without this script the textarea works alone.
//
// Round trip: a row keeps the reward object it was built from, so keys and parameters the JSON gave
// stay as they were; a parameter is written when the JSON gave it or its value differs from the default.
(() => {
  const textarea = document.getElementById("id_rewards");
  const mount = document.getElementById("reward-editor");
  const registryScript = document.getElementById("reward-registry");
  if (!textarea || !mount || !registryScript) return;
  const registry = JSON.parse(registryScript.textContent);
  const known = new Map(registry.rewards.map((reward) => [reward.name, reward]));
  const unavailable = new Set(registry.unavailable.map((reward) => reward.name)); // a clash lists a name twice
  const KEY_ORDER = ["name", "weight", "params", "condition_on", "threshold"];

  let rows = []; // { spec: the reward object, given: parameter names the JSON gave, errors: Map input -> message }

  function element(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key in node) node[key] = value;
      else node.setAttribute(key, value);
    }
    node.append(...children.filter((child) => child !== null && child !== undefined));
    return node;
  }

  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

  // --- JSON <-> rows ---------------------------------------------------------------------------
  function parseRewards(text) {
    let value;
    try {
      value = JSON.parse(text);
    } catch (error) {
      return { error: `Not valid JSON: ${error.message}.` };
    }
    if (!Array.isArray(value) || !value.every((r) => r && typeof r === "object" && !Array.isArray(r))) {
      return { error: 'Write a list of rewards, e.g. [{"name": "exact_match", "weight": 1.0}].' };
    }
    return { rewards: value };
  }

  function rowFrom(spec) {
    const params = spec.params && typeof spec.params === "object" && !Array.isArray(spec.params) ? spec.params : null;
    return { spec, given: new Set(Object.keys(params || {})), errors: new Map() };
  }

  function ordered(spec) {
    const keys = [...KEY_ORDER.filter((k) => k in spec), ...Object.keys(spec).filter((k) => !KEY_ORDER.includes(k))];
    return Object.fromEntries(keys.map((k) => [k, spec[k]]));
  }

  // The same layout as the server's (RewardsField.prepare_value): one reward a line.
  function writeTextarea() {
    if (rows.some((row) => row.errors.size)) return; // an input the user is still fixing: keep the last valid JSON
    textarea.value = rows.length ? "[\n" + rows.map((row) => "  " + JSON.stringify(ordered(row.spec))).join(",\n") + "\n]" : "[]";
    setJsonError("");
  }

  // --- parameter inputs, typed by the default ----------------------------------------------------
  function displayValue(param, value) {
    if (param.type === "optional") {
      if (value === null || value === undefined) return "";
      if (typeof value === "string") {
        try { JSON.parse(value); return JSON.stringify(value); } catch { return value; } // "5" stays a string
      }
      return JSON.stringify(value);
    }
    if (param.type === "json") return JSON.stringify(value);
    return value === null || value === undefined ? "" : String(value);
  }

  // The typed value of a parameter's input, or { error } to show beside it.
  function readValue(param, input) {
    const text = input.value;
    if (param.type === "bool") return { value: input.checked };
    if (param.type === "str") return { value: text };
    if (param.type === "number") {
      if (text.trim() === "" || !Number.isFinite(Number(text))) return { error: "enter a number" };
      return { value: Number(text) };
    }
    if (param.type === "optional") {
      if (text.trim() === "") return { value: null };
      try { return { value: JSON.parse(text) }; } catch { return { value: text }; } // plain text: a string
    }
    try { return { value: JSON.parse(text) }; } catch { return { error: "enter JSON, e.g. [1, 2] or {\"a\": 1}" }; }
  }

  function paramInput(row, param) {
    const params = row.spec.params || {};
    const value = param.name in params ? params[param.name] : param.default;
    const id = `reward-${rows.indexOf(row)}-${param.name}`;
    const label = element("label", { htmlFor: id, className: "reward-param-name" }, param.name);
    if (param.type === "code") {
      return element("span", { className: "reward-param code-param", title: "a Python object: set in code, not in a task" },
        element("span", { className: "reward-param-name" }, param.name), ` = ${param.default} (set in code)`);
    }
    const input = element("input", { id, dataset: { param: param.name } });
    if (param.type === "bool") {
      input.type = "checkbox";
      input.checked = Boolean(value);
    } else {
      input.type = param.type === "number" ? "number" : "text";
      if (param.type === "number") input.step = "any";
      if (param.type === "json") input.className = "code";
      input.placeholder = { optional: "empty: none", json: "JSON" }[param.type] || "";
      input.value = displayValue(param, value);
    }
    const message = element("span", { className: "reward-input-error", role: "alert" });
    input.addEventListener(param.type === "bool" ? "change" : "input", () => {
      const read = readValue(param, input);
      showInputError(row, input, message, read.error);
      if (read.error) return;
      const next = { ...(row.spec.params || {}) };
      if (row.given.has(param.name) || !same(read.value, param.default)) next[param.name] = read.value;
      else delete next[param.name];
      if (Object.keys(next).length || "params" in row.spec) row.spec.params = next;
      writeTextarea();
    });
    return element("span", { className: "reward-param" }, label, input, message);
  }

  function showInputError(row, input, message, error) {
    message.textContent = error || "";
    input.classList.toggle("invalid", Boolean(error));
    if (error) row.errors.set(input, error);
    else row.errors.delete(input);
  }

  // A reward the registry does not list: no parameter names to offer, so its params as one JSON object.
  function unknownParams(row) {
    const input = element("input", { type: "text", className: "code", dataset: { param: "params" },
      value: JSON.stringify(row.spec.params ?? {}), "aria-label": "parameters (JSON)" });
    const message = element("span", { className: "reward-input-error", role: "alert" });
    input.addEventListener("input", () => {
      let value;
      try { value = JSON.parse(input.value); } catch { value = undefined; }
      const error = value && typeof value === "object" && !Array.isArray(value) ? "" : 'enter a JSON object, e.g. {"limit": 10}';
      showInputError(row, input, message, error);
      if (error) return;
      row.spec.params = value;
      writeTextarea();
    });
    return element("span", { className: "reward-param" }, element("span", { className: "reward-param-name" }, "params"), input, message);
  }

  // --- a row -----------------------------------------------------------------------------------
  function nameSelect(row) {
    const taken = new Set(rows.filter((other) => other !== row).map((other) => other.spec.name));
    const option = (name, label, extra = {}) =>
      element("option", { value: name, selected: name === row.spec.name, disabled: taken.has(name), ...extra }, label);
    const builtin = registry.rewards.filter((r) => r.builtin);
    const plugins = registry.rewards.filter((r) => !r.builtin);
    const select = element("select", { className: "reward-name", "aria-label": "reward" },
      element("optgroup", { label: "Built in" }, ...builtin.map((r) => option(r.name, r.name, { title: r.description }))),
      plugins.length ? element("optgroup", { label: "Plugins" },
        ...plugins.map((r) => option(r.name, `${r.name} (${r.distribution})`, { title: r.description }))) : null,
      registry.unavailable.length ? element("optgroup", { label: "Unavailable plugins" },
        ...registry.unavailable.map((r) => element("option", {
          value: r.name, disabled: true, selected: r.name === row.spec.name, title: r.error,
        }, `${r.name} (${r.distribution}): ${r.error}`))) : null);
    if (!known.has(row.spec.name) && !unavailable.has(row.spec.name)) { // kept as typed; the server names the problem
      select.prepend(element("option", { value: row.spec.name, selected: true, disabled: true }, `${row.spec.name} (unknown)`));
    }
    select.addEventListener("change", () => {
      const old = row.spec.name;
      row.spec.name = select.value;
      // The parameters belong to the old reward; conditions on it follow the row to its new name.
      if ("params" in row.spec) row.spec.params = {};
      row.given = new Set();
      for (const other of rows) if (other.spec.condition_on === old) other.spec.condition_on = select.value;
      if (row.spec.condition_on === select.value) row.spec.condition_on = null; // not on itself
      render();
      writeTextarea();
    });
    return select;
  }

  function conditionControls(row) {
    const others = rows.filter((other) => other !== row).map((other) => other.spec.name);
    const current = row.spec.condition_on ?? "";
    const select = element("select", { className: "reward-condition", "aria-label": "condition on" },
      element("option", { value: "", selected: current === "" }, "no condition"),
      ...others.map((name) => element("option", { value: name, selected: name === current }, `${name} ≥ threshold`)));
    if (current && !others.includes(current)) { // names a reward the run lacks: the server says so
      select.append(element("option", { value: current, selected: true }, `${current} (not a reward of this run)`));
    }
    const threshold = element("input", {
      type: "number", step: "any", className: "reward-threshold", "aria-label": "threshold",
      value: String(row.spec.threshold ?? 1.0), hidden: !current,
    });
    const message = element("span", { className: "reward-input-error", role: "alert" });
    select.addEventListener("change", () => {
      if (select.value) {
        row.spec.condition_on = select.value;
        if (!("threshold" in row.spec)) row.spec.threshold = Number.isFinite(Number(threshold.value)) ? Number(threshold.value) : 1.0;
      } else if (row.spec.condition_on !== undefined) {
        row.spec.condition_on = null;
      }
      threshold.hidden = !select.value;
      writeTextarea();
    });
    threshold.addEventListener("input", () => {
      const error = threshold.value.trim() === "" || !Number.isFinite(Number(threshold.value)) ? "enter a number" : "";
      showInputError(row, threshold, message, error);
      if (error) return;
      row.spec.threshold = Number(threshold.value);
      writeTextarea();
    });
    return element("span", { className: "reward-condition-controls", title: "GDPO Eq. 8: this reward counts only where the chosen reward reaches the threshold" },
      element("span", { className: "reward-param-name" }, "counts only when"), select, threshold, message);
  }

  function rowElement(row, index) {
    const reward = known.get(row.spec.name);
    const weight = element("input", {
      type: "number", step: "any", className: "reward-weight", "aria-label": "weight",
      value: String(row.spec.weight ?? 1.0),
    });
    const weightError = element("span", { className: "reward-input-error", role: "alert" });
    weight.addEventListener("input", () => {
      const error = weight.value.trim() === "" || !Number.isFinite(Number(weight.value)) ? "enter a number" : "";
      showInputError(row, weight, weightError, error);
      if (error) return;
      row.spec.weight = Number(weight.value);
      writeTextarea();
    });
    const remove = element("button", { type: "button", className: "reward-remove small-button", title: "remove this reward" }, "Remove");
    remove.addEventListener("click", () => {
      rows.splice(rows.indexOf(row), 1);
      for (const other of rows) if (other.spec.condition_on === row.spec.name) other.spec.condition_on = null;
      render();
      writeTextarea();
    });
    let params;
    if (reward) {
      params = reward.params.length ? reward.params.map((param) => paramInput(row, param))
        : [element("span", { className: "muted" }, "no parameters")];
    } else { // unknown or unavailable: its parameters as one JSON object, kept as written
      params = [unknownParams(row)];
    }
    const range = reward ? `range ${reward.value_range[0]} to ${reward.value_range[1]}` : "";
    return element("div", { className: "reward-row", dataset: { index: String(index), reward: row.spec.name } },
      element("div", { className: "reward-head" }, nameSelect(row),
        element("label", { className: "reward-param-name" }, "weight", weight), weightError,
        conditionControls(row), remove),
      element("p", { className: "help" }, [reward?.description, range].filter(Boolean).join(" · ")),
      element("div", { className: "reward-params" }, ...params));
  }

  // --- the editor --------------------------------------------------------------------------------
  const list = element("div", { className: "reward-rows" });
  const add = element("button", { type: "button", id: "reward-add", className: "small-button" }, "Add reward");
  const toggle = element("button", { type: "button", id: "reward-json-toggle", className: "small-button", "aria-pressed": "false" }, "Edit as JSON");
  const jsonError = element("p", { id: "reward-json-error", className: "errorlist", role: "alert", hidden: true });
  mount.append(list, element("div", { className: "reward-toolbar" }, add, toggle));
  textarea.after(jsonError);

  function setJsonError(message) {
    jsonError.textContent = message;
    jsonError.hidden = !message;
  }

  function render() {
    // The inputs are rebuilt from each row's last valid values, so no old input's error stands.
    for (const row of rows) row.errors.clear();
    list.replaceChildren(...rows.map(rowElement));
    const used = new Set(rows.map((row) => row.spec.name));
    add.disabled = !registry.rewards.some((reward) => !used.has(reward.name));
  }

  add.addEventListener("click", () => {
    const used = new Set(rows.map((row) => row.spec.name));
    const next = registry.rewards.find((reward) => !used.has(reward.name));
    if (!next) return;
    rows.push(rowFrom({ name: next.name, weight: 1.0 }));
    render();
    writeTextarea();
    list.lastElementChild?.querySelector("select.reward-name")?.focus();
  });

  function showJson(on) {
    toggle.setAttribute("aria-pressed", String(on));
    toggle.textContent = on ? "Hide JSON" : "Edit as JSON";
    textarea.hidden = !on;
    if (!on && !jsonError.textContent) jsonError.hidden = true;
  }
  toggle.addEventListener("click", () => showJson(textarea.hidden));

  textarea.addEventListener("input", () => {
    const parsed = parseRewards(textarea.value);
    if (parsed.error) { // the rows keep the last valid rewards until the JSON parses again
      setJsonError(`${parsed.error} The rows above still show the last valid rewards.`);
      return;
    }
    setJsonError("");
    rows = parsed.rewards.map(rowFrom);
    render();
  });

  // Submitting while an editor input holds no valid value would post the JSON from before it.
  textarea.form?.addEventListener("submit", (event) => {
    const invalid = rows.find((row) => row.errors.size);
    if (!invalid) return;
    event.preventDefault();
    const input = invalid.errors.keys().next().value;
    input.focus();
    input.scrollIntoView({ block: "center" });
  });

  const initial = parseRewards(textarea.value);
  rows = initial.rewards ? initial.rewards.map(rowFrom) : [];
  render();
  mount.hidden = false;
  // The JSON stays in view when it is what needs fixing: unreadable, or refused by the server.
  const refused = textarea.closest(".field")?.classList.contains("has-error");
  showJson(Boolean(initial.error || refused));
  if (initial.error) setJsonError(`${initial.error} Fix it here; the rows show the rewards once it parses.`);
  mount.dataset.ready = "true"; // for tests
})();
