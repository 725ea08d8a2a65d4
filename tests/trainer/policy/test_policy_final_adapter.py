"""A run's final adapter (`PolicyUpdater.save_final_adapter`) loads on another machine: adapter_config.json
names the run's model id rather than the training machine's model folder, and the README beside it says
how to get that model, for a built-in model by a command that builds it into a fresh model cache."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.config import SMOLLM2_MODEL, TINY_MODEL, RunConfig
from trainer.models import adapter_readme

pytestmark = pytest.mark.usefixtures("torch_setup")
ROOT = Path(__file__).resolve().parents[3]
ADAPTER_LOAD = re.compile(r'PeftModel\.from_pretrained\(AutoModelForCausalLM\.from_pretrained\("([^"]+)"\), "([^"]+)"\)')


def save_trained_adapter(model_path: Path, folder: Path, config: RunConfig):
    """The policy model as the trainer loads it, with LoRA weights no fresh adapter has (PEFT starts B at
    zero, so an untrained adapter would give the same logits on any base model), saved as a run's final
    adapter. Returns (model, tokenizer)."""
    import torch

    from trainer.policy import PolicyUpdater, load_policy_model, lora_parameters

    model, tokenizer = load_policy_model(model_path, seed=config.seed)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in lora_parameters(model).values():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    PolicyUpdater(model, tokenizer).save_final_adapter(folder, write=True, base_model=config.model,
                                                       readme=adapter_readme(config))
    return model.eval(), tokenizer


def adapter_config(folder: Path) -> dict:
    return json.loads((folder / "adapter_config.json").read_text())


@pytest.mark.slow
def test_the_smollm2_adapter_loads_with_peft_on_the_model_its_readme_builds_in_a_fresh_cache(
        smollm2_dir, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter = tmp_path / "adapter"
    trained, tokenizer = save_trained_adapter(smollm2_dir, adapter, RunConfig(model=SMOLLM2_MODEL))
    assert adapter_config(adapter)["base_model_name_or_path"] == SMOLLM2_MODEL
    readme = (adapter / "README.md").read_text()
    for text in (readme, (adapter / "adapter_config.json").read_text()):
        assert str(smollm2_dir) not in text and str(Path.home()) not in text

    # The README's own command and PeftModel line, with the user's cache folder and adapter folder filled in.
    cache = tmp_path / "fresh-cache"
    [command] = [line.strip() for line in readme.splitlines() if line.strip().startswith("python -m trainer")]
    argv = [sys.executable, *shlex.split(command.replace("--cache DIR", f"--cache {cache}"))[1:]]
    built = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    [(model_folder, _)] = ADAPTER_LOAD.findall(readme)
    assert Path(built.stdout.split()[-1]) == cache / model_folder.removeprefix("DIR/")

    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(cache / model_folder.removeprefix("DIR/")),
                                       adapter).eval()
    lora = {k: v for k, v in trained.state_dict().items() if "lora_" in k}
    assert lora and lora.keys() <= loaded.state_dict().keys()
    for name, weight in lora.items():
        torch.testing.assert_close(loaded.state_dict()[name], weight, rtol=0, atol=0, msg=name)
    ids = tokenizer("What is 7 + 5? Answer briefly.", return_tensors="pt").input_ids
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, trained(ids).logits)


def test_a_hub_models_adapter_names_its_hub_id_and_the_readme_loads_it_by_that_id(tiny_model_path, tmp_path):
    hub_id = "Qwen/Qwen2.5-0.5B-Instruct"  # the weights here are the tiny model's: only the naming is checked
    save_trained_adapter(tiny_model_path, tmp_path / "adapter", RunConfig(model=hub_id))
    assert adapter_config(tmp_path / "adapter")["base_model_name_or_path"] == hub_id
    readme = (tmp_path / "adapter" / "README.md").read_text()
    assert ADAPTER_LOAD.findall(readme) == [(hub_id, "path/to/this/folder")]
    assert str(tiny_model_path) not in readme


def test_the_tiny_models_readme_says_it_cannot_be_rebuilt_which_the_cli_confirms(tiny_model_path, tmp_path):
    from trainer.run.cli import main

    config = RunConfig(model=TINY_MODEL, program="toy", seed=3)
    save_trained_adapter(tiny_model_path, tmp_path / "adapter", config)
    assert adapter_config(tmp_path / "adapter")["base_model_name_or_path"] == TINY_MODEL
    readme = (tmp_path / "adapter" / "README.md").read_text()
    assert "cannot be rebuilt from the command line" in readme and "seed 3" in readme
    assert ADAPTER_LOAD.findall(readme) == [("MODEL_CACHE/tiny-toy", "path/to/this/folder")]
    assert main(["models", "build", "tiny", "--cache", str(tmp_path / "cache")]) == 2
    assert not (tmp_path / "cache").exists()


def test_the_adapters_the_run_hands_to_vllm_each_step_keep_naming_the_loaded_folder(tiny_model_path, tmp_path):
    """Only the final adapter leaves the machine; the per-step ones stay as PEFT writes them."""
    from trainer.policy import PolicyUpdater, load_policy_model

    model, tokenizer = load_policy_model(tiny_model_path)
    updater = PolicyUpdater(model, tokenizer)
    updater.save_final_adapter(tmp_path / "final", write=True, base_model=TINY_MODEL,
                               readme=adapter_readme(RunConfig(model=TINY_MODEL)))
    updater.save_adapter(tmp_path / "v1")
    assert adapter_config(tmp_path / "v1")["base_model_name_or_path"] == str(tiny_model_path)
    assert model.peft_config["default"].base_model_name_or_path == str(tiny_model_path)
    assert updater.save_final_adapter(tmp_path / "other", write=False, base_model=TINY_MODEL, readme="") is None
    assert not (tmp_path / "other").exists()
