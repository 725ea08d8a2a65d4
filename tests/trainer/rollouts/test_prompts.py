"""Chat prompts: programs speak in messages; the chat template or raw text decides what the model
sees; sampler and updater tokenize through one function and see the same ids."""

from __future__ import annotations

import json
import shutil

import pytest

from trainer.rollouts.prompts import (
    RenderedPrompt,
    chat_messages,
    raw_text,
    render_prompt,
    resolve_prompt_format,
)

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("torch_setup")

MESSAGES = chat_messages("Answer briefly.", "Question: what is 2 + 2?")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="module")
def no_template_model(tiny_model_path, tmp_path_factory):
    """The tiny model with its chat template removed: a base model's tokenizer."""
    path = tmp_path_factory.mktemp("base") / "model"
    shutil.copytree(tiny_model_path, path)
    (path / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def test_messages_encode_exactly_as_the_chat_template_and_text_as_plain_tokens(tokenizer):
    from trainer.policy import encode_prompt

    expected = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert encode_prompt(tokenizer, MESSAGES) == list(expected)
    rendered = render_prompt(tokenizer, MESSAGES, "chat")
    assert isinstance(rendered, RenderedPrompt) and rendered.messages == tuple(MESSAGES)
    assert rendered == ("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n"
                        "Question: what is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    assert encode_prompt(tokenizer, rendered) == list(expected)  # the messages ride along with the text

    text = "Question: what is 2 + 2?\n"
    assert encode_prompt(tokenizer, text) == tokenizer(text, add_special_tokens=True)["input_ids"]
    raw = render_prompt(tokenizer, MESSAGES, "raw")
    assert raw == raw_text(MESSAGES) == "Answer briefly.\n\nQuestion: what is 2 + 2?\n" and raw.messages is None
    assert encode_prompt(tokenizer, raw) == tokenizer(raw, add_special_tokens=True)["input_ids"]
    # A text prompt under the chat format is one user message.
    assert render_prompt(tokenizer, "hi", "chat").messages == ({"role": "user", "content": "hi"},)


def test_auto_uses_the_template_where_there_is_one_and_chat_without_one_says_what_to_do(tokenizer, no_template_model):
    from transformers import AutoTokenizer

    base = AutoTokenizer.from_pretrained(no_template_model)
    assert resolve_prompt_format(tokenizer, "auto") == "chat"
    assert resolve_prompt_format(base, "auto") == "raw"
    assert resolve_prompt_format(tokenizer, "raw") == "raw"
    with pytest.raises(ValueError, match="prompt_format 'chat' needs a tokenizer with a chat template.*'raw'"):
        resolve_prompt_format(base, "chat")


def test_sampler_and_updater_see_identical_prompt_ids(policy, monkeypatch):
    import trainer.backends.hf as hf
    import trainer.policy.batching as batching
    from trainer.backends import get_backend
    from trainer.policy import PolicyExample, PolicyUpdater, UpdateConfig
    from trainer.rollouts.prompts import encode_prompt

    model, tok = policy
    seen = {"sampler": [], "updater": []}

    def spy(who):
        def encode(tokenizer, prompt):
            ids = encode_prompt(tokenizer, prompt)
            seen[who].append(ids)
            return ids
        return encode

    monkeypatch.setattr(hf, "encode_prompt", spy("sampler"))
    monkeypatch.setattr(batching, "encode_prompt", spy("updater"))
    prompts = [render_prompt(tok, MESSAGES, "chat"), render_prompt(tok, chat_messages("Be brief.", "hi"), "chat")]
    groups = get_backend("hf", model=model, tokenizer=tok).generate(prompts, 1, max_new_tokens=4, seed=0)
    examples = [PolicyExample(p, g[0].text, 1.0, completion_ids=g[0].token_ids) for p, g in zip(prompts, groups, strict=True)]
    PolicyUpdater(model, tok, UpdateConfig()).update(examples)
    assert seen["sampler"] == seen["updater"] == [encode_prompt(tok, list(p.messages)) for p in prompts]


class Events:
    def __init__(self):
        self.steps = []

    def status(self, *args, **kwargs): ...

    def step(self, event):
        self.steps.append(event)

    def should_stop(self):
        return False


def toy_config(**changes):
    from trainer.config import RunConfig

    return RunConfig(**{"program": "toy", "steps": 1, "group_size": 2, "rollouts_per_example": 2,
                        "examples_per_step": 1, "max_new_tokens": 3, "max_context_length": 64, "eval_every": 0,
                        "checkpoint_every": 0, "rewards": [{"name": "char_f1"}], **changes})


@pytest.mark.parametrize("prompt_format", ["auto", "raw"])
def test_a_step_records_what_the_model_saw_and_the_messages(tmp_path, prompt_format):
    from trainer.run.loop import Trainer

    events = Events()
    Trainer(toy_config(prompt_format=prompt_format), tmp_path / "run", events,
            model_cache_dir=tmp_path / "models").run()
    call = events.steps[0]["rollouts"][0]["calls"][0]
    if prompt_format == "auto":  # the tiny tokenizer has a ChatML template
        assert call["prompt"].startswith("<|im_start|>system\nRepeat the word.<|im_end|>\n<|im_start|>user\n")
        assert call["messages"] == chat_messages("Repeat the word.", call["messages"][1]["content"])
    else:
        assert call["prompt"].startswith("Repeat the word.\n\nRepeat: ") and call["messages"] is None


def test_chat_on_a_model_without_a_template_is_a_config_error_on_that_field(tmp_path, no_template_model):
    from trainer.config import ConfigError
    from trainer.run.loop import Trainer

    with pytest.raises(ConfigError, match="chat template") as info:
        Trainer(toy_config(prompt_format="chat", model=str(no_template_model)), tmp_path / "run", Events())
    assert info.value.field == "prompt_format"
