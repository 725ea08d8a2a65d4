"""The trajectory inspector's note on where a run's per-token numbers come from (templates/runs/
trajectories.html): a run whose config says they come from a pass with dropout (the TRL callback's
`token_details_pass`, cohort/trl.py) gets one line saying so; a Cohort run (a pass without dropout)
and a run whose pass had none get nothing."""

import pytest
from django.urls import reverse

from tests.webapp.runs.seeding import hover_step_event, ingest, make_run, with_token_details

pytestmark = pytest.mark.django_db

NOTE = 'id="token-pass-note"'


def inspector_html(client, owner, config: dict) -> str:
    run = make_run(owner, config={"strategy": "grpo", "padding": "fill", **config})
    ingest(run, [with_token_details(hover_step_event(1, examples=1, rollouts=2))])
    client.force_login(owner)
    response = client.get(reverse("runs:trajectories", args=[run.pk, 1]), {"example": "claim-0"})
    assert response.status_code == 200
    return response.content.decode()


def test_a_run_whose_numbers_carry_dropout_noise_says_so(client, owner):
    html = inspector_html(client, owner, {"token_details_pass": {"entropies": "loss pass, train mode",
                                                                 "train_mode_dropout": 0.05}})
    assert NOTE in html
    note = html.split(NOTE)[1].split("</p>")[0]
    assert "loss pass, train mode, with dropout 0.05" in note and "not the sampler's alone" in note
    assert "how-to/tokens/#where-the-numbers-come-from" in note


@pytest.mark.parametrize("config", [{}, {"token_details_pass": {"entropies": "loss pass, train mode",
                                                                 "train_mode_dropout": 0.0}}],
                         ids=["cohort-run", "no-dropout"])
def test_other_runs_get_no_note(client, owner, config):
    html = inspector_html(client, owner, config)
    assert 'id="token-data"' in html and NOTE not in html
