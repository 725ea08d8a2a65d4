"""A tiny random-initialized Llama and its tokenizer, built locally and loadable by `from_pretrained`.

Tests, the CPU worker and the benchmarks need a causal LM without any download. This module trains a
byte-level BPE tokenizer on a small corpus, builds a random `LlamaConfig` model and saves both with
`save_pretrained`, so the rest of the code loads it exactly as it loads a Hugging Face model id:

    path = ensure_tiny_model()
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)

Why `initializer_range=0.5` (docs/explanation/architecture.md, "Running"): with the usual 0.02 the frozen random `lm_head`
keeps every logit near 0, so a LoRA adapter on the attention/MLP projections cannot move the output
distribution (one-token supervised training saturates at p=0.05). With 0.5 the hidden states and the
head are large enough for LoRA to reach p=1.0 in about 20 steps.

Builds are atomic: everything is written to a temporary sibling folder, a marker file is written
last, and the folder is renamed into place. A folder with a matching marker is reused as is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from trainer.models.cache import MARKER_NAME  # defined there so the launch form reads it without torch

DEFAULT_TINY_DIR_ENV = "COHORT_TINY_MODEL_DIR"
# Bump when the build recipe changes, so an old cached folder is rebuilt instead of silently reused.
BUILD_VERSION = 2

# Qwen's special tokens: `<|im_end|>` closes every chat turn and is the EOS, so `generate` stops at
# the end of an assistant turn; `<|endoftext|>` pads. The BOS is kept for raw-text prompts only
# (Llama-style), so a raw prompt is never empty.
PAD, BOS, EOS = "<|endoftext|>", "<s>", "<|im_end|>"
IM_START = "<|im_start|>"

# ChatML, the layout of Qwen2.5 / Qwen3 instruct models: <|im_start|>role, newline, content,
# <|im_end|>, newline; the generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Enough English-ish text, digits, punctuation and the tags our programs emit for the BPE trainer to
# learn useful merges. Byte-level BPE can still encode any string: unseen text falls back to bytes.
_BUILTIN_CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "Question: What is the capital of France? Answer: Paris.",
    "Question: How many apples are left if you have 12 and eat 5? Answer: 7.",
    "Let's think step by step. First we add the numbers, then we divide by two.",
    "The answer is 42. The result is 3.14. The total is 1,000 dollars.",
    "<think> I need to call a tool to find the weather. </think>",
    '<tool_call> {"name": "get_weather", "parameters": {"city": "Berlin"}} </tool_call>',
    "<response> The weather in Berlin is sunny. </response>",
    "Claim: The film was released in 1994. Verdict: SUPPORTED. Evidence: the article says so.",
    "Search query: who wrote the novel and when was it published",
    "Reasoning: the passage mentions the author, so the answer follows from it.",
    "My card was declined at the shop, can you help me understand why?",
    "I would like to transfer money to my savings account today.",
    "Please rewrite the request without any personal information such as names or emails.",
    "Once upon a time there was a small model that learned to answer questions.",
    "yes no maybe true false correct incorrect good bad right wrong",
    "one two three four five six seven eight nine ten hundred thousand million",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 20 50 99 100 2024 + - * / = ( ) [ ] { } < > : ; , . ? ! ' \"",
    "A B C D E F G H I J K L M N O P Q R S T U V W X Y Z",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "the of and to in is was for on that with as by at from it this be are or an which",
    "user assistant system message content context passage document title summary label",
    "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nQuestion: 2 + 2?<|im_end|>\n"
    "<|im_start|>assistant\nAnswer: 4<|im_end|>\n",
)


def build_tiny_model(
    path: str | os.PathLike[str],
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    initializer_range: float = 0.5,
    seed: int = 0,
    corpus: Iterable[str] | None = None,
) -> Path:
    """Build (or reuse) a tiny random Llama and its tokenizer in `path`; return the path.

    `vocab_size` is the BPE trainer's target; the model's embedding size is the tokenizer's actual
    length (a small corpus can end below the target). `corpus` strings are added to the built-in one.
    A folder whose marker records the same build parameters is reused; one with other parameters
    (or an older recipe) is replaced.
    """
    path = Path(path).expanduser()
    corpus_list = list(corpus or ())
    params = {
        "build_version": BUILD_VERSION,
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "initializer_range": initializer_range,
        "seed": seed,
        "corpus_sha256": hashlib.sha256("\n".join(corpus_list).encode()).hexdigest(),
    }
    if hidden_size % 16 != 0 and not _marker_matches(path, params):
        raise ValueError(f"hidden_size must be a multiple of 16 (4 heads of even width), got {hidden_size}")

    def write(folder: Path) -> None:
        tokenizer = _train_tokenizer([*_BUILTIN_CORPUS, *corpus_list], vocab_size)
        tokenizer.save_pretrained(folder)
        _random_llama(tokenizer, hidden_size, num_layers, initializer_range, seed).save_pretrained(folder)

    return build_atomically(path, params, write)


def build_atomically(path: str | os.PathLike[str], params: dict, write: Callable[[Path], None]) -> Path:
    """`write(folder)` into a temporary sibling of `path`, then a marker recording `params`, then a
    rename into place; a folder whose marker matches `params` is reused as it is, one with other
    parameters replaced, and a folder that is not a build is refused (never deleted)."""
    path = Path(path).expanduser()
    if _marker_matches(path, params):
        return path
    if path.exists() and not (path / MARKER_NAME).exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(_foreign_message(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from a worker running as another user
    try:
        write(tmp)
        # Written last: its presence means every other file is complete.
        (tmp / MARKER_NAME).write_text(json.dumps(params, indent=2, sort_keys=True))
        _move_into_place(tmp, path, params)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def ensure_tiny_model(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return the default tiny model folder, building it on first use.

    Location: `cache_dir` if given, else `$COHORT_TINY_MODEL_DIR`, else `~/.cache/cohort/tiny-llama`.
    """
    if cache_dir is None:
        cache_dir = os.environ.get(DEFAULT_TINY_DIR_ENV) or Path.home() / ".cache" / "cohort" / "tiny-llama"
    return build_tiny_model(cache_dir)


def _marker_matches(path: Path, params: dict) -> bool:
    try:
        return json.loads((path / MARKER_NAME).read_text()) == params
    except (OSError, ValueError):
        return False


def _move_into_place(tmp: Path, path: Path, params: dict) -> None:
    """Rename the finished build onto `path`; tolerate a concurrent builder that got there first."""
    if path.exists():
        if _marker_matches(path, params):
            return  # another process finished the same build meanwhile
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # an empty folder (e.g. a fresh tmp_path) is simply taken over
        elif (path / MARKER_NAME).exists():
            # A complete build with other parameters: move it aside first, since a rename cannot
            # replace a non-empty folder. Readers see either the old folder, no folder, or the new one.
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            os.replace(path, old / "model")
            shutil.rmtree(old, ignore_errors=True)
        else:
            raise FileExistsError(_foreign_message(path))
    try:
        os.rename(tmp, path)
    except OSError:
        if not _marker_matches(path, params):
            raise


def _foreign_message(path: Path) -> str:
    return (
        f"{path} exists and is not a tiny-model build (no {MARKER_NAME}); remove it or choose another folder"
    )


def _train_tokenizer(corpus: Sequence[str], vocab_size: int) -> PreTrainedTokenizerFast:
    specials = [PAD, BOS, EOS, IM_START]
    backend = Tokenizer(models.BPE())
    # Byte-level: any string round-trips through encode/decode, so rollouts never hit an unknown token.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    # Llama-style: `add_special_tokens=True` prepends BOS and nothing else.
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, backend.token_to_id(BOS))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        padding_side="left",  # generation pads on the left; training code sets its own layout
        model_max_length=2048,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _random_llama(
    tokenizer: PreTrainedTokenizerFast, hidden_size: int, num_layers: int, initializer_range: float, seed: int
) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as in the Llama 3 / Qwen2 models we target
        max_position_embeddings=2048,
        initializer_range=initializer_range,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with _seeded(seed):
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


@contextlib.contextmanager
def _seeded(seed: int):
    # Seed the weights without disturbing the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
