"""Per-token details in a real browser (daphne serving the real ASGI app, details stored through the
real ingest service): the run page's Tokens charts, the trajectory inspector coloured token by token with
a fork's alternatives in its tooltip, and the step page's forks table sorted and leading to one token."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import hover_step_event, ingest, make_run, with_byte_fork, with_token_details
from webapp.runs.inspector.steps import trajectory_grid
from webapp.runs.inspector.token_cells import cell_key
from webapp.runs.inspector.token_pieces import is_sampled, piece_label
from webapp.runs.inspector.token_reads import step_forks
from webapp.runs.models import Run

NEUTRAL = ("the inspector's token colouring, legend and tooltips, the step page's forks table and the run page's "
           "Tokens charts as drawn and driven in a real browser; the reads behind them are tested on both backends "
           "in tests/webapp/runs/inspector/test_token_views.py, tests/webapp/runs/ingest/test_tokens.py and "
           "tests/webapp/runs/inspector/test_divergence.py")
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

STEP = 2
TOKEN_METRICS = {  # the trainer's tokens/... step metrics (issue 45), per module too
    "tokens/entropy/mean": 1.2, "tokens/entropy/p10": 0.1, "tokens/entropy/p50": 0.9, "tokens/entropy/p90": 2.4,
    "tokens/entropy/best": 1.0, "tokens/entropy/worst": 1.5, "tokens/entropy/mean/create_query": 1.1,
    "tokens/entropy/mean/summarize": 1.3, "tokens/mismatch/share": 0.02, "tokens/mismatch/max": 0.4,
    "tokens/prob/mean": 0.7,
}


def shown(text: str) -> str:
    """A piece as the tooltip draws it (spaces as ·)."""
    return text.replace(" ", "·").replace("\n", "⏎")


def token_selector(key: str, i: int) -> str:
    return f"#traj-grid td[data-tokens='{key}'] .token-view .tok[data-i='{i}']"


def in_viewport(page, selector: str) -> bool:
    box = page.locator(selector).bounding_box()
    view = page.viewport_size
    return box is not None and box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= view["width"] \
        and box["y"] + box["height"] <= view["height"]


def test_tokens_coloured_forks_explained_and_linked(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    run = make_run(owner, state=Run.State.SUCCEEDED, name="tokens",
                   config={"strategy": "grpo", "padding": "fill", "token_details": "all"})
    events = [with_token_details(hover_step_event(s, examples=2, rollouts=4, seed=1,
                                                  extra={k: v + s / 10 for k, v in TOKEN_METRICS.items()}), seed=s)
              for s in (1, STEP)]
    shared = [t for t in events[1]["rollouts"] if t["example_id"] == "claim-1"]
    for t in shared[1:]:  # claim-1's rollouts share a call (with forks), as MHGPO's forks share the calls before theirs
        t["calls"][1].update({k: shared[0]["calls"][1][k] for k in ("completion", "tokens", "module")})
    ingest(run, [events[0], with_byte_fork(events[1], entropy=3.5)])
    grid = trajectory_grid(run, STEP, "claim-0")
    tokens = {cell_key(row.rollout.index, cell.call.position): cell.call.tokens
              for row in grid.rows for cell in row.cells if cell.call is not None}
    entropies = [(e, key, i) for key, t in tokens.items() for i, e in enumerate(t.entropy) if e is not None]
    lowest, highest = min(entropies), max(entropies)
    forks = step_forks(run, 1, STEP)
    log_in(page, asgi_server, "alice")

    # The run page: a Tokens section right after Learning, its three charts, a series per key.
    page.goto(f"{asgi_server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('#section-tokens #chart-tokens-entropy')?.dataset.points === '2'")
    order = page.eval_on_selector_all(".chart-section:not([hidden])", "els => els.map((e) => e.id)")
    assert order[:2] == ["section-learning", "section-tokens"]
    charts = page.eval_on_selector_all("#section-tokens .chart", "els => els.map((e) => e.id)")
    assert sorted(charts) == ["chart-tokens-entropy", "chart-tokens-mismatch", "chart-tokens-prob"]
    names = set(page.evaluate("() => document.querySelector('#chart-tokens-entropy').data.map(t => t.name)"))
    assert {"mean", "p10", "p50", "p90", "best", "worst", "mean create_query", "mean summarize"} <= names
    assert set(page.evaluate("() => document.querySelector('#chart-tokens-mismatch').data.map(t => t.name)")) >= {
        "share", "max"}
    page.locator("#section-tokens").scroll_into_view_if_needed()
    screenshot("token-run-charts")

    # The inspector: the word-diff view until a colouring is chosen.
    page.goto(f"{asgi_server}/runs/{run.pk}/steps/{STEP}/trajectories?example=claim-0")
    page.wait_for_selector("#traj-grid[data-tokens-ready='1']")
    assert page.is_hidden("#token-legend") and page.locator(".token-view").count() == 0
    page.select_option("#token-colour", "entropy")
    page.wait_for_selector("#traj-grid[data-colour='entropy']")
    assert "colour=entropy" in page.url  # remembered in the URL
    assert page.locator("#traj-grid .token-view").count() == len(tokens)
    legend = page.inner_text("#token-legend")
    assert "Entropy (nats)" in legend
    assert page.inner_text("#token-legend .legend-min") == "0.00"
    assert page.inner_text("#token-legend .legend-max") == f"{highest[0]:.2f}"
    background = "(s) => getComputedStyle(document.querySelector(s)).backgroundColor"
    low, high = (page.evaluate(background, token_selector(key, i)) for _, key, i in (lowest, highest))
    assert low != high and "rgba(0, 0, 0, 0)" not in (low, high)

    # A fork: underlined; hovering it shows its numbers and alternatives, the sampled one marked.
    key, index = next((k, i) for k, t in tokens.items() for i in sorted(t.topk) if t.pieces[i].strip())
    fork_token = tokens[key]
    span = token_selector(key, index)
    assert "underline" in page.evaluate("(s) => getComputedStyle(document.querySelector(s)).textDecorationLine", span)
    page.hover(span)
    page.wait_for_selector(f"#token-tip[data-cell='{key}'][data-token='{index}']:visible")
    tip = page.inner_text("#token-tip")
    assert "Alternatives at this fork" in tip and f"entropy\t{fork_token.entropy[index]:.3f} nats" in tip
    alternatives = page.eval_on_selector_all("#token-tip .tip-alts tr",
                                             "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))")
    assert alternatives == [[shown(piece_label(a.piece, a.hex)), f"{a.prob:.2f}", "✓ chosen" if is_sampled(a, fork_token, index) else ""]
                            for a in fork_token.topk[index]]
    assert in_viewport(page, "#token-tip")  # not clipped by the window
    screenshot("token-inspector-entropy")

    # A byte token's fork: its bytes, never U+FFFD, in the token view and among the alternatives.
    byte_key, byte_index = cell_key(0, 0), max(tokens[cell_key(0, 0)].byte_pieces)
    byte_span = token_selector(byte_key, byte_index)
    assert page.text_content(byte_span) == "⟨98\u00a080⟩" and "tok-bytes" in page.get_attribute(byte_span, "class")
    page.hover(byte_span)
    page.wait_for_selector(f"#token-tip[data-cell='{byte_key}'][data-token='{byte_index}']:visible")
    byte_alternatives = page.eval_on_selector_all("#token-tip .tip-alts tr",
                                                  "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))")
    assert byte_alternatives == [["⟨98\u00a080⟩", "0.50", "✓ chosen"], ["⟨98\u00a081⟩", "0.45", ""], ["·ok", "0.05", ""]]
    assert "\ufffd" not in page.inner_text("#traj-grid") + page.inner_text("#token-tip")

    # The step's forks: below the groups, folded, its row count in the summary; one row per distinct
    # context (claim-1's shared call once, with its count); highest entropy first; sorted by probability,
    # then by entropy again.
    page.goto(f"{asgi_server}/runs/{run.pk}/steps/{STEP}/")
    page.wait_for_selector("#forks-section")
    assert page.is_hidden("#token-forks")
    screenshot("token-step-folded")
    copies = sum(len(f.copies) for f in forks)
    assert page.inner_text("#forks-count") == f"{len(forks)} rows for {copies} positions" and copies > len(forks)
    page.click("#forks-section > summary")
    page.wait_for_selector("#token-forks", state="visible")
    rows = page.locator("#token-forks tbody tr")
    assert rows.count() == len(forks)
    column = "(i) => [...document.querySelectorAll('#token-forks tbody tr')].map(r => r.cells[i].dataset.value)"
    assert [int(v) for v in page.evaluate(column, 2)] == [len(f.copies) for f in forks]
    assert [float(v) for v in page.evaluate(column, 5)] == [pytest.approx(f.entropy) for f in forks]
    assert page.inner_text("#token-forks tbody tr:first-child td.context strong.chosen") == "⟨98\u00a080⟩"
    assert page.locator("#token-forks tbody tr:first-child .chosen-alt").count() == 1
    page.click("#token-forks th[data-key='prob'] button")
    page.wait_for_selector("#token-forks[data-sorted='prob-descending']")
    probs = [float(v) for v in page.evaluate(column, 6)]
    assert probs == sorted(probs, reverse=True)
    page.click("#token-forks th[data-key='entropy'] button")
    page.wait_for_selector("#token-forks[data-sorted='entropy-descending']")
    assert page.get_attribute("#token-forks th[data-key='entropy']", "aria-sort") == "descending"
    entropy_order = [float(v) for v in page.evaluate(column, 5)]
    assert entropy_order == sorted(entropy_order, reverse=True)
    screenshot("token-forks-table")

    # A row leads to the inspector at its token: coloured by entropy, highlighted, in view, alternatives open.
    top = forks[0]
    rows.first.locator("a.fork-link").click()
    page.wait_for_url(f"**/trajectories?example={top.example_id}&attempt=1&rollout={top.rollout}"
                      f"&call={top.position}&token={top.token}")
    focus_key = cell_key(top.rollout, top.position)
    page.wait_for_selector(f"#traj-grid[data-focused='{focus_key}:{top.token}']")
    assert page.input_value("#token-colour") == "entropy"
    focused = token_selector(focus_key, top.token)
    assert "focus" in page.get_attribute(focused, "class").split()
    assert page.text_content(focused) == piece_label(top.chosen, top.chosen_hex)
    assert in_viewport(page, focused)
    page.wait_for_selector(f"#token-tip.pinned[data-cell='{focus_key}'][data-token='{top.token}']:visible")
    tip_alternatives = page.eval_on_selector_all("#token-tip .tip-alts tr code", "els => els.map(e => e.textContent)")
    assert tip_alternatives == [shown(piece_label(a.piece, a.hex)) for a in top.alternatives]
    assert in_viewport(page, "#token-tip")
    screenshot("token-inspector-focus")
