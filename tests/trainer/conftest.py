"""Shared fixtures for trainer tests: one tiny local model per test session.

Torch is imported lazily (inside fixtures) so the pure-Python trainer tests do not pay for it.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def torch_setup():
    """One intra-op thread: the tiny model's ops are too small to gain from threads on shared cores."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    return torch


@pytest.fixture(scope="session")
def tiny_model_path(torch_setup, tmp_path_factory):
    """A tiny random Llama + tokenizer, built once per session (about a second)."""
    from trainer.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture
def policy(tiny_model_path):
    """A fresh LoRA-wrapped copy of the tiny model and its tokenizer: (model, tokenizer)."""
    from trainer.policy import load_policy_model

    return load_policy_model(tiny_model_path)
