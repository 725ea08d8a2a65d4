"""The runs table's test world: its URL, the names a listing shows, a run config, and (as the
`table` fixture in conftest.py) four runs of one owner."""

from django.urls import reverse

LIST = reverse("runs:list")


def names(client, expect_status=200, **params) -> list[str]:
    response = client.get(LIST, params)
    assert response.status_code == expect_status, response.content.decode()[:2000]
    return [r.name for r in response.context["runs"]]


def config(**values) -> dict:
    return {"steps": 4, "strategy": "grpo", "estimator": "grpo", "learning_rate": 1e-5,
            "rewards": [{"name": "exact_match", "weight": 1.0}], **values}
