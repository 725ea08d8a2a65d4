// The trajectory inspector token by token (issue 45). The page embeds the tokens of every call that
// stored per-token details ("token-data", webapp/runs/inspector/token_cells.py): per token [piece, entropy,
// log-prob, |sampler - trainer|, share of the advantage, sampler log-prob, trainer log-prob], the
// alternatives kept at its forks as [piece, probability, whether it is the sampled one] (the server
// tells by token id), and its byte tokens: a token that is part of a multi-byte character comes as its
// bytes, ⟨E2 80⟩, never as the replacement character. "Colour tokens by" (remembered in ?colour=) draws each such completion
// as one span per token on a colour scale explained by the legend; "none" keeps the server's word-diff
// view. Hovering a token shows its numbers and, at a fork, the alternatives; a click pins that tooltip.
// A link with ?rollout=&call=&token= opens the page at that token: highlighted, scrolled to, tooltip pinned.
(function () {
  "use strict";

  const PIECE = 0, ENTROPY = 1, LOGPROB = 2, MISMATCH = 3, SHARE = 4, SAMPLER = 5, TRAINER = 6;
  // Ramps as [position 0..1, [r, g, b]] stops: sequential ones from near white to a strong colour, the
  // advantage share's diverging around 0 (red: the update pushes the token down, blue: up).
  const ORANGES = [[0, [255, 247, 236]], [0.5, [253, 187, 132]], [1, [215, 48, 31]]];
  const PURPLES = [[0, [252, 251, 253]], [0.5, [188, 189, 220]], [1, [84, 39, 143]]];
  const REDS = [[0, [255, 245, 240]], [0.5, [252, 146, 114]], [1, [165, 15, 21]]];
  const RED_BLUE = [[0, [178, 24, 43]], [0.5, [247, 247, 247]], [1, [33, 102, 172]]];
  // Per colouring: the column, the ramp, and the value range: the page's own min..max unless fixed.
  // Entropy starts at 0 (a sure token), a log-prob ends at 0 (a certain one; darker is less likely), and
  // the mismatch is read against the trainer's 0.1-nat threshold, so its scale is fixed at 0..0.5.
  const SCALES = {
    entropy: { column: ENTROPY, ramp: ORANGES, low: 0, title: "Entropy (nats)", note: "darker: the policy was less sure" },
    logprob: { column: LOGPROB, ramp: PURPLES, high: 0, reversed: true, title: "Log-prob of the sampled token",
               note: "darker: less likely" },
    mismatch: { column: MISMATCH, ramp: REDS, fixed: [0, 0.5], openEnd: true, title: "Sampler/trainer |Δ log-prob| (nats)",
                note: "above 0.1: the mismatch metric counts it" },
    advantage: { column: SHARE, ramp: RED_BLUE, diverging: true, title: "Share of the advantage (A · w / T)",
                 note: "red: pushed down, blue: pushed up" },
  };
  const SPECIAL = /^<\|.*\|>$|^<\/?s>$|^<eos>$|^<pad>$/; // end-of-turn and similar tokens the text skips
  const WHITESPACE = { " ": "·", "\n": "⏎", "\t": "⇥", "\r": "␍" };

  const visible = (text) => text.replace(/[ \n\t\r]/g, (c) => WHITESPACE[c]);
  const num = (v, digits = 3) => (v === null || v === undefined ? "—" : Number(v).toFixed(digits));
  const signed = (v) => (v === null || v === undefined ? "—" : (v > 0 ? "+" : "") + short(v));
  // A share of the advantage is small (A / T): show it with significant digits, not fixed ones.
  const short = (v) => (Math.abs(v) >= 0.01 || v === 0 ? v.toFixed(3) : v.toPrecision(2));

  function mix(ramp, t) {
    for (let k = 1; k < ramp.length; k++) {
      const [p1, c1] = ramp[k], [p0, c0] = ramp[k - 1];
      if (t <= p1 || k === ramp.length - 1) {
        const f = Math.min(1, Math.max(0, (t - p0) / (p1 - p0)));
        return c0.map((c, i) => Math.round(c + (c1[i] - c) * f));
      }
    }
    return ramp[0][1];
  }

  const rgb = (c) => `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
  // Dark text on light colours, white on dark ones (perceived brightness, ITU-R BT.601).
  const ink = (c) => (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] < 140 ? "#fff" : "#1d2330");

  function main() {
    const source = document.getElementById("token-data");
    const grid = document.getElementById("traj-grid");
    const select = document.getElementById("token-colour");
    if (!source || !grid || !select) return;
    const data = JSON.parse(source.textContent);
    const legend = document.getElementById("token-legend");
    const ranges = {};

    function range(name) {
      if (ranges[name]) return ranges[name];
      const scale = SCALES[name];
      let lo = Infinity, hi = -Infinity;
      for (const cell of Object.values(data.cells)) {
        for (const row of cell.tokens) {
          const v = row[scale.column];
          if (v === null) continue;
          lo = Math.min(lo, v);
          hi = Math.max(hi, v);
        }
      }
      if (scale.fixed) return (ranges[name] = scale.fixed);
      if (lo === Infinity) { lo = 0; hi = 1; }
      if (scale.diverging) {
        const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
        return (ranges[name] = [-m, m]);
      }
      if (scale.low !== undefined) lo = Math.min(lo, scale.low);
      if (scale.high !== undefined) hi = Math.max(hi, scale.high);
      if (hi <= lo) hi = lo + 1;
      return (ranges[name] = [lo, hi]);
    }

    function colourOf(name, v) {
      const scale = SCALES[name];
      const [lo, hi] = range(name);
      const t = Math.min(1, Math.max(0, (v - lo) / (hi - lo)));
      return mix(scale.ramp, scale.reversed ? 1 - t : t);
    }

    function drawLegend(name) {
      const scale = SCALES[name];
      legend.hidden = !scale;
      grid.dataset.colour = name;
      if (!scale) { legend.replaceChildren(); return; }
      const [lo, hi] = range(name);
      const stops = [];
      for (let k = 0; k <= 10; k++) stops.push(`${rgb(colourOf(name, lo + ((hi - lo) * k) / 10))} ${k * 10}%`);
      const label = (v) => (Math.abs(v) < 0.01 && v !== 0 ? v.toPrecision(2) : v.toFixed(2));
      legend.innerHTML = "";
      const title = document.createElement("strong");
      title.textContent = scale.title;
      const low = document.createElement("span");
      low.className = "legend-min";
      low.textContent = label(lo);
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
      const high = document.createElement("span");
      high.className = "legend-max";
      high.textContent = (scale.openEnd ? "≥" : "") + label(hi);
      const note = document.createElement("span");
      note.className = "muted";
      note.textContent = scale.note;
      const fork = document.createElement("span");
      fork.innerHTML = '<span class="tok fork sample">fork</span> underlined: alternatives kept there · <span class="tok tok-none sample">grey</span>: no value';
      legend.append(title, low, swatch, high, note, fork);
    }

    // The token view of a cell, made the first time a colouring needs it: one span per token.
    function tokenView(td) {
      let view = td.querySelector(".token-view");
      if (view) return view;
      const key = td.dataset.tokens;
      const cell = data.cells[key];
      view = document.createElement("div");
      view.className = "completion token-view";
      view.dataset.cell = key;
      const diverge = data.diverge[key];
      const byteTokens = new Set(cell.bytes || []);
      cell.tokens.forEach((row, i) => {
        const span = document.createElement("span");
        span.className = "tok";
        span.dataset.i = String(i);
        span.textContent = row[PIECE];
        if (SPECIAL.test(row[PIECE])) span.classList.add("tok-special");
        if (byteTokens.has(i)) span.classList.add("tok-bytes");
        if (cell.forks[i] !== undefined) {
          span.classList.add("fork");
          span.tabIndex = 0; // a keyboard reaches the alternatives too
        }
        if (diverge === i) span.classList.add("diverge-tok");
        view.appendChild(span);
      });
      td.querySelector(".completion").after(view);
      return view;
    }

    function paint(name) {
      const scale = SCALES[name];
      for (const td of grid.querySelectorAll("td[data-tokens]")) {
        const words = td.querySelector(".completion:not(.token-view)");
        if (!scale) {
          words.hidden = false;
          const view = td.querySelector(".token-view");
          if (view) view.hidden = true;
          continue;
        }
        const view = tokenView(td);
        words.hidden = true;
        view.hidden = false;
        const rows = data.cells[td.dataset.tokens].tokens;
        for (const span of view.children) {
          const v = rows[Number(span.dataset.i)][scale.column];
          span.classList.toggle("tok-none", v === null);
          if (v === null) {
            span.style.backgroundColor = span.style.color = "";
          } else {
            const c = colourOf(name, v);
            span.style.backgroundColor = rgb(c);
            span.style.color = ink(c);
          }
        }
      }
      drawLegend(name);
      if (!scale) hide(true);
    }

    // --- the tooltip ------------------------------------------------------------------------------------
    const tip = document.createElement("div");
    tip.id = "token-tip";
    tip.className = "token-tip";
    tip.setAttribute("role", "tooltip");
    tip.hidden = true;
    document.body.appendChild(tip);
    let shown = null, pinned = null;

    function fill(span) {
      const key = span.closest(".token-view").dataset.cell;
      const i = Number(span.dataset.i);
      const cell = data.cells[key];
      const row = cell.tokens[i];
      const alternatives = cell.forks[i];
      const head = document.createElement("div");
      head.className = "tip-head";
      const piece = document.createElement("code");
      piece.textContent = visible(row[PIECE]);
      const where = document.createElement("span");
      where.className = "muted";
      where.textContent = ` token ${i + 1} of ${cell.tokens.length}${alternatives ? " · fork" : ""}`;
      head.append(piece, where);
      const table = document.createElement("table");
      table.className = "tip-numbers";
      const p = row[LOGPROB] === null ? null : Math.exp(row[LOGPROB]);
      const lines = [
        ["entropy", row[ENTROPY] === null ? "—" : `${num(row[ENTROPY])} nats`],
        ["log-prob", row[LOGPROB] === null ? "—" : `${num(row[LOGPROB])} (p = ${num(p)})`],
        ["sampler / trainer", `${num(row[SAMPLER])} / ${num(row[TRAINER])}`],
        ["|Δ|", row[MISMATCH] === null ? "—" : `${num(row[MISMATCH])} nats`],
        ["advantage share", signed(row[SHARE])],
      ];
      for (const [name, value] of lines) {
        const tr = table.insertRow();
        tr.insertCell().textContent = name;
        tr.insertCell().textContent = value;
      }
      tip.replaceChildren(head, table);
      if (data.diverge[key] === i) {
        const parting = document.createElement("div");
        parting.className = "tip-parting";
        parting.textContent = "The best and the worst rollout chose differently here first.";
        tip.append(parting);
      }
      if (alternatives) {
        const title = document.createElement("div");
        title.className = "tip-alts-title";
        title.textContent = "Alternatives at this fork";
        const alts = document.createElement("table");
        alts.className = "tip-alts";
        let chosenListed = false;
        for (const [altPiece, prob, sampled] of alternatives) {
          const tr = alts.insertRow();
          const chosen = sampled === true;
          chosenListed = chosenListed || chosen;
          if (chosen) tr.className = "chosen";
          const code = document.createElement("code");
          code.textContent = visible(altPiece);
          tr.insertCell().append(code);
          const bar = document.createElement("span");
          bar.className = "prob-bar";
          bar.style.width = `${Math.round(Math.max(0, Math.min(1, prob)) * 60)}px`;
          const cellProb = tr.insertCell();
          cellProb.className = "num";
          cellProb.append(bar, ` ${num(prob, 2)}`);
          tr.insertCell().textContent = chosen ? "✓ chosen" : "";
        }
        tip.append(title, alts);
        if (!chosenListed) {
          const note = document.createElement("div");
          note.className = "muted";
          note.textContent = "The sampled token is not among them.";
          tip.append(note);
        }
      }
      tip.dataset.cell = key;
      tip.dataset.token = String(i);
    }

    function place(span) {
      const r = span.getBoundingClientRect();
      const w = tip.offsetWidth, h = tip.offsetHeight;
      const left = Math.max(4, Math.min(r.left, window.innerWidth - w - 4));
      let top = r.bottom + 6;
      if (top + h > window.innerHeight - 4) top = Math.max(4, r.top - h - 6); // no room below: above it
      tip.style.left = `${left}px`;
      tip.style.top = `${top}px`;
    }

    function show(span) {
      if (shown !== span) fill(span);
      shown = span;
      tip.hidden = false;
      tip.classList.toggle("pinned", span === pinned);
      place(span);
    }

    function hide(unpin) {
      if (unpin && pinned) { pinned.classList.remove("pinned"); pinned = null; }
      if (pinned) { show(pinned); return; }
      tip.hidden = true;
      shown = null;
    }

    function pin(span) {
      if (pinned) pinned.classList.remove("pinned");
      pinned = span;
      span.classList.add("pinned");
      show(span);
    }

    const tokenOf = (target) => (target instanceof Element ? target.closest(".token-view .tok") : null);
    grid.addEventListener("mouseover", (event) => { const span = tokenOf(event.target); if (span) show(span); });
    grid.addEventListener("mouseout", (event) => {
      if (tokenOf(event.target) && !tokenOf(event.relatedTarget)) hide(false);
    });
    grid.addEventListener("focusin", (event) => { const span = tokenOf(event.target); if (span) show(span); });
    grid.addEventListener("focusout", () => hide(false));
    grid.addEventListener("click", (event) => {
      const span = tokenOf(event.target);
      if (!span) return;
      if (span === pinned) hide(true);
      else pin(span);
    });
    document.addEventListener("click", (event) => { if (pinned && !tokenOf(event.target)) hide(true); });
    document.addEventListener("keydown", (event) => { if (event.key === "Escape") hide(true); });
    // The tooltip is fixed to the window: it follows its token when the page or a cell scrolls.
    window.addEventListener("scroll", () => { if (shown) place(shown); }, true);
    window.addEventListener("resize", () => { if (shown) place(shown); });

    select.addEventListener("change", () => {
      paint(select.value);
      const url = new URL(location.href);
      url.searchParams.set("colour", select.value);
      history.replaceState(history.state, "", url);
    });
    paint(select.value);

    // A link to one token: highlight it, bring it into view, pin its tooltip.
    const focus = data.focus;
    if (focus && SCALES[select.value]) {
      const td = grid.querySelector(`td[data-tokens="${CSS.escape(focus.cell)}"]`);
      const span = td && td.querySelector(`.token-view .tok[data-i="${focus.token}"]`);
      if (span) {
        span.classList.add("focus");
        span.scrollIntoView({ block: "center", inline: "center" });
        pin(span);
        grid.dataset.focused = `${focus.cell}:${focus.token}`;
      }
    }
    grid.dataset.tokensReady = "1";
  }

  window.addEventListener("DOMContentLoaded", main);
})();
