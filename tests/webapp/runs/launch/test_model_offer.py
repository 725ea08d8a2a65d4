"""The launch form's model picker (webapp/runs/launch/model_offer.py): built-in models marked once built,
the allow-list's ids, prefixes and folders, and the hub models already in the model cache."""

import pytest

from trainer.models.cache import MARKER_NAME
from webapp.limits.models import AllowedModel
from webapp.runs.launch.model_offer import model_offer

pytestmark = pytest.mark.django_db


@pytest.fixture
def cache(tmp_path, settings):
    settings.COHORT_MODEL_CACHE = tmp_path / "model-cache"
    settings.COHORT_MODEL_ALLOWED_PREFIXES = []
    return settings.COHORT_MODEL_CACHE


def entries(groups, key):
    return {e.value: e for g in groups if g.key == key for e in g.entries}


def test_an_empty_server_offers_the_builtins_not_yet_built(cache):
    groups = model_offer()
    assert [g.key for g in groups] == ["builtin"]  # empty groups are left out
    builtins = entries(groups, "builtin")
    assert list(builtins) == ["builtin:tiny", "builtin:smollm2-135m-instruct"]
    assert not any(e.downloaded for e in builtins.values())
    assert "built on first use" in builtins["builtin:tiny"].note


def test_built_and_downloaded_models_are_marked_and_allow_list_prefixes_fill_a_start(cache, settings, owner):
    (cache / "tiny-toy").mkdir(parents=True)
    (cache / "tiny-toy" / MARKER_NAME).write_text("{}")
    (cache / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc").mkdir(parents=True)
    (cache / "hub" / "models--someone--unlisted" / "snapshots" / "def").mkdir(parents=True)
    AllowedModel.objects.create(kind=AllowedModel.Kind.ID, value="Qwen/Qwen2.5-0.5B-Instruct", note="small")
    AllowedModel.objects.create(kind=AllowedModel.Kind.PREFIX, value="meta-llama/")
    AllowedModel.objects.create(kind=AllowedModel.Kind.LOCAL_ROOT, value="/srv/models")
    settings.COHORT_MODEL_ALLOWED_PREFIXES = ["HuggingFaceTB/", "meta-llama/"]

    groups = model_offer(owner)
    assert [g.title for g in groups] == ["Built in", "Allowed on this server", "Already downloaded"]
    tiny = entries(groups, "builtin")["builtin:tiny"]
    assert tiny.downloaded and "already built for toy" in tiny.note
    assert not entries(groups, "builtin")["builtin:smollm2-135m-instruct"].downloaded

    allowed = entries(groups, "allowed")
    assert list(allowed) == ["Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/", "HuggingFaceTB/", "/srv/models/"]
    qwen = allowed["Qwen/Qwen2.5-0.5B-Instruct"]
    assert qwen.downloaded and not qwen.prefix and "small" in qwen.note
    llama = allowed["meta-llama/"]  # listed once, though the settings name it too
    assert llama.prefix and llama.kind == "prefix" and llama.label == "meta-llama/…"
    assert allowed["/srv/models/"].prefix and "a model folder under /srv/models" in allowed["/srv/models/"].note

    downloaded = entries(groups, "downloaded")
    assert list(downloaded) == ["Qwen/Qwen2.5-0.5B-Instruct", "someone/unlisted"]
    assert downloaded["Qwen/Qwen2.5-0.5B-Instruct"].allowed
    assert not downloaded["someone/unlisted"].allowed  # shown, but a launch by this user is refused


def test_staff_may_launch_any_downloaded_hub_model(cache, staff):
    (cache / "hub" / "models--someone--unlisted" / "snapshots" / "def").mkdir(parents=True)
    assert entries(model_offer(staff), "downloaded")["someone/unlisted"].allowed
