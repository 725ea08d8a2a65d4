"""The models the launch form's picker offers: the built-in models (marked when already built), the
allow-list's ids, prefixes and folders, and the hub models already in the model cache.

The picker only helps to fill the model box; what may be launched is still decided at launch by the
allow-list (webapp/limits/model_allowlist.py), so an entry here is never a permission.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from trainer.config import BUILTIN_MODELS, TINY_MODEL
from trainer.models.cache import built_builtin_models, downloaded_hub_models
from webapp.limits.model_allowlist import model_refusal


@dataclass(frozen=True)
class ModelEntry:
    """One clickable entry: `value` goes into the model box, `label` is shown, `note` explains it."""

    value: str
    label: str
    note: str
    downloaded: bool = False  # built or downloaded into the model cache already: no wait at the start
    allowed: bool = True  # False: this user's launch would be refused (shown, so the user learns why)
    prefix: bool = False  # the start of an id or a folder: the user types the rest

    @property
    def kind(self) -> str:
        return "prefix" if self.prefix else "model"


@dataclass(frozen=True)
class ModelGroup:
    key: str  # "builtin", "allowed" or "downloaded": the picker's data-group, for tests and styles
    title: str
    entries: list[ModelEntry]


def model_offer(user=None) -> list[ModelGroup]:
    """The picker's groups, empty ones left out. `user`: whose allow-list rules mark the downloaded
    models a launch would refuse (None: every model counts as allowed)."""
    cache = settings.COHORT_MODEL_CACHE
    built = built_builtin_models(cache)
    downloaded = downloaded_hub_models(cache)
    groups = [
        ModelGroup("builtin", "Built in", [_builtin_entry(model, what, built.get(model))
                                           for model, what in BUILTIN_MODELS.items()]),
        ModelGroup("allowed", "Allowed on this server", _allow_list_entries(set(downloaded))),
        ModelGroup("downloaded", "Already downloaded", [
            ModelEntry(model, model, "in this server's model cache: starts without a download",
                       downloaded=True, allowed=user is None or model_refusal(user, model) is None)
            for model in downloaded]),
    ]
    return [group for group in groups if group.entries]


def _builtin_entry(model: str, what: str, builds: list[str] | None) -> ModelEntry:
    if not builds:
        return ModelEntry(model, model, f"{what}; built on first use")
    if model == TINY_MODEL:  # one build per program: its tokenizer holds the program's words
        return ModelEntry(model, model, f"{what}; already built for {', '.join(builds)}", downloaded=True)
    return ModelEntry(model, model, f"{what}; already built", downloaded=True)


def _allow_list_entries(downloaded: set[str]) -> list[ModelEntry]:
    from webapp.limits.models import AllowedModel

    rows = list(AllowedModel.objects.order_by("kind", "value").values_list("kind", "value", "note"))
    ids = [(value, note) for kind, value, note in rows if kind == AllowedModel.Kind.ID]
    prefixes = [(value, note) for kind, value, note in rows if kind == AllowedModel.Kind.PREFIX]
    prefixes += [(value, "allowed by the server's settings (COHORT_MODEL_ALLOWED_PREFIXES)")
                 for value in getattr(settings, "COHORT_MODEL_ALLOWED_PREFIXES", []) or []
                 if value and value not in {p for p, _ in prefixes}]
    roots = [(value, note) for kind, value, note in rows if kind == AllowedModel.Kind.LOCAL_ROOT]
    entries = [ModelEntry(value, value, _joined("an allowed hub id", note,
                                                "in the model cache" if value in downloaded else ""),
                          downloaded=value in downloaded) for value, note in ids]
    entries += [ModelEntry(value, f"{value}…", _joined(f"any hub id starting with {value}", note), prefix=True)
                for value, note in prefixes]
    entries += [ModelEntry(_folder(value), f"{_folder(value)}…",
                           _joined(f"a model folder under {value}", note), prefix=True) for value, note in roots]
    return entries


def _folder(root: str) -> str:
    return root if root.endswith("/") else f"{root}/"


def _joined(*parts: str) -> str:
    return "; ".join(part for part in parts if part)
