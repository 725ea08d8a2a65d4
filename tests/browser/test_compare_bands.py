"""Seeds as bands on the compare page in a real browser (issue 44): 4 runs = 2 configurations x 2 seeds
are drawn as exactly 2 mean curves, each with its filled band in its own color, and hovering a mean
names its group's runs."""

import pytest

from tests.browser.session import PASSWORD, log_in
from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.models import Run

NEUTRAL = ("the compare page's bands drawn by Plotly in a real browser; the groups, the bands' numbers and "
           "the queries they come from (JsonNumber, EpochSeconds) are tested on both backends in "
           "tests/webapp/runs/charts/test_compare_groups.py")
pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True)]

STEPS = 12


def seeded(owner, learning_rate, seed, offset):
    run = make_run(owner, state=Run.State.SUCCEEDED, name=f"lr {learning_rate} seed {seed}",
                   config={"learning_rate": learning_rate, "seed": seed})
    ingest(run, ({"type": "step", "attempt": 1, "step": s, "metrics": {"reward/mean": offset + s / STEPS}}
                 for s in range(1, STEPS + 1)))
    return run


def test_two_configurations_of_two_seeds_are_two_bands(page, screenshot, asgi_server, make_user):
    owner = make_user("alice", password=PASSWORD)
    runs = [seeded(owner, 0.01, 0, 0.0), seeded(owner, 0.01, 1, 0.2), seeded(owner, 0.001, 0, 1.0),
            seeded(owner, 0.001, 1, 1.3)]
    log_in(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/runs/compare?{'&'.join(f'runs={r.pk}' for r in runs)}&metrics=reward/mean")
    page.wait_for_selector("#compare-reward-mean[data-bands='2']")
    traces = page.evaluate("""() => document.querySelector('#compare-reward-mean').data.map((t) => ({
        name: t.name, fill: t.fill || null, band: t.cohortBand || null, showlegend: t.showlegend,
        color: t.line && t.line.color, fillcolor: t.fillcolor || null, y: t.y, x: t.x }))""")
    means = [t for t in traces if not t["band"]]
    filled = [t for t in traces if t["fill"] == "tonexty"]
    assert [t["name"] for t in means] == ["learning_rate=0.01 (n=2)", "learning_rate=0.001 (n=2)"]
    assert len(filled) == 2 and len(traces) == 6  # per group: its mean, its lower edge, its upper edge filled down
    for mean in means:
        low, high = (next(t for t in traces if t["band"] == edge and t["name"] == mean["name"]) for edge in ("low", "high"))
        assert low["x"] == mean["x"] == list(range(1, STEPS + 1))
        assert all(lo <= m <= hi for lo, m, hi in zip(low["y"], mean["y"], high["y"], strict=True))
        assert high["color"] == mean["color"] and high["fillcolor"].startswith("rgba(")
    assert means[0]["color"] != means[1]["color"]
    assert means[0]["y"][0] == pytest.approx(0.1 + 1 / STEPS, abs=1e-5)
    assert filled[0]["y"][0] == pytest.approx(0.2 + 1 / STEPS, abs=1e-5)  # two seeds: the CI reaches the higher

    page.locator("#compare-reward-mean").scroll_into_view_if_needed()
    box = page.locator("#compare-reward-mean .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5, steps=5)
    page.wait_for_function("() => document.querySelector('#compare-reward-mean .hoverlayer').textContent.length > 0")
    hover = page.evaluate("() => document.querySelector('#compare-reward-mean .hoverlayer').textContent")
    for run in runs:
        assert f"{run.name} (#{run.pk})" in hover
    assert "mean of n=2" in hover
    screenshot("compare-bands")
