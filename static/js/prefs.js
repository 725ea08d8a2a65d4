// The signed-in user's preferences on the server (GET/PUT /prefs/<key>, webapp/prefs): chart
// settings, legend choices, the run page's layout. A page works without them (defaults); a change is
// written a moment after the last one, so a dragged slider is one request. After each write
// document.body.dataset.<chartsSaved | legendSaved | layoutSaved> says "1" or "error", and <...>Value
// the JSON last stored (tests wait on them).
(function () {
  "use strict";

  const SAVE_AFTER_MS = 400;
  const state = { url: null, csrf: null, timers: {} };

  // url: the preference URL with the literal key "key" in it (the page's {% url 'prefs:preference' 'key' %}).
  function configure(url) {
    state.url = url;
    state.csrf = csrfToken();
  }

  function urlOf(key) { return state.url.replace(/key$/, encodeURIComponent(key)); }

  async function load(key) {
    if (!state.url) return null;
    try {
      const response = await fetch(urlOf(key), { credentials: "same-origin" });
      if (!response.ok) return null;
      const body = await response.json();
      return body.value && typeof body.value === "object" ? body.value : null;
    } catch (err) {
      return null; // defaults: a page works without its stored preferences
    }
  }

  function save(key, value) {
    if (!state.url) return;
    clearTimeout(state.timers[key]);
    state.timers[key] = setTimeout(async () => {
      try {
        const response = await fetch(urlOf(key), {
          method: "PUT", credentials: "same-origin", body: JSON.stringify(value),
          headers: { "Content-Type": "application/json", "X-CSRFToken": state.csrf || "" },
        });
        const flag = key === "charts" ? "chartsSaved" : key.startsWith("legend") ? "legendSaved" : "layoutSaved";
        document.body.dataset[flag] = response.ok ? "1" : "error";
        if (response.ok) document.body.dataset[`${flag}Value`] = JSON.stringify(value); // what the server now holds
      } catch (err) {
        /* kept for this page only */
      }
    }, SAVE_AFTER_MS);
  }

  function csrfToken() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (input) return input.value;
    const cookie = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
    return cookie ? decodeURIComponent(cookie.slice("csrftoken=".length)) : null;
  }

  window.cohortPrefs = { configure, load, save };
})();
