"""The tiny local model: loads through from_pretrained, builds atomically, is reused when complete."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")


def test_loads_through_from_pretrained(tiny_model_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)

    assert model.config.model_type == "llama"
    assert model.config.initializer_range == 0.5
    assert model.config.vocab_size == len(tokenizer)
    # The random init really used the wide range (docs/explanation/architecture.md: 0.02 cannot be moved by LoRA).
    assert 0.4 < model.lm_head.weight.std().item() < 0.6
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        assert getattr(tokenizer, name) is not None
        assert getattr(tokenizer, name) == getattr(model.config, name)

    text = "Question: what is 12 + 7? Answer: 19. Ünïcödé and emoji 🙂 survive."
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == text

    # ChatML, as Qwen instruct models: the turn closes with <|im_end|>, the EOS generation stops at.
    chat = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], tokenize=False,
        add_generation_prompt=True,
    )
    assert chat == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))
    assert torch.isfinite(logits).all()


def test_second_build_reuses_the_folder(tiny_model_path):
    from trainer.models import build_tiny_model
    from trainer.models.tiny import MARKER_NAME

    before = {p.name: p.stat().st_mtime_ns for p in tiny_model_path.iterdir()}
    assert build_tiny_model(tiny_model_path) == tiny_model_path
    after = {p.name: p.stat().st_mtime_ns for p in tiny_model_path.iterdir()}
    assert after == before
    assert MARKER_NAME in after
    # No temporary build folders are left beside it.
    assert [p.name for p in tiny_model_path.parent.iterdir()] == [tiny_model_path.name]


def test_ensure_tiny_model_uses_the_env_folder(tiny_model_path, monkeypatch):
    from trainer.models import DEFAULT_TINY_DIR_ENV, ensure_tiny_model

    monkeypatch.setenv(DEFAULT_TINY_DIR_ENV, str(tiny_model_path))
    assert ensure_tiny_model() == tiny_model_path
    assert ensure_tiny_model(tiny_model_path) == tiny_model_path


def test_other_parameters_rebuild_and_a_foreign_folder_is_refused(tmp_path):
    import torch
    from safetensors.torch import load_file

    from trainer.models import build_tiny_model
    from trainer.models.tiny import MARKER_NAME

    path = tmp_path / "m"
    path.mkdir()  # an empty folder is taken over
    small = dict(vocab_size=300, hidden_size=32, num_layers=1, corpus=["zebra crossing zebra crossing"])
    build_tiny_model(path, seed=1, **small)
    first = load_file(path / "model.safetensors")
    assert json.loads((path / MARKER_NAME).read_text())["seed"] == 1

    build_tiny_model(path, seed=2, **small)
    second = load_file(path / "model.safetensors")
    assert json.loads((path / MARKER_NAME).read_text())["seed"] == 2
    assert not torch.equal(first["lm_head.weight"], second["lm_head.weight"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a tiny-model build"):
        build_tiny_model(foreign, **small)
    assert (foreign / "notes.txt").read_text() == "mine"
