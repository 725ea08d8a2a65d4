// The run page's Credit section (webapp/runs/credit): its body is an HTML fragment loaded after the
// page renders, and its "Compare" form reloads the fragment with the chosen steps.
(function () {
  "use strict";

  function load(section, url) {
    var body = section.querySelector(".credit-body");
    body.setAttribute("aria-busy", "true");
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        return response.text().then(function (html) {
          if (!response.ok && html.indexOf("credit-error") < 0) {
            html = '<p class="error" id="credit-error">The credit could not be loaded (' + response.status + ").</p>";
          }
          body.innerHTML = html;
          body.removeAttribute("aria-busy");
          wire(section);
        });
      })
      .catch(function () {
        body.innerHTML = '<p class="error" id="credit-error">The credit could not be loaded: the server did not answer.</p>';
        body.removeAttribute("aria-busy");
      });
  }

  function wire(section) {
    var form = section.querySelector("#credit-steps");
    if (!form) return;
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var query = new URLSearchParams(new FormData(form)).toString();
      load(section, form.dataset.fragment + (query ? "?" + query : ""));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var section = document.getElementById("credit-section");
    if (section) load(section, section.dataset.url);
  });
})();
