"""Prompts of module calls: chat messages for instruct models, plain text for base models.

A program describes each module call as chat messages (a system message with the module's
instructions, a user message with its inputs; `chat_messages`). The run's `prompt_format` decides
what the model sees:

- "chat": the tokenizer's chat template with the generation prompt (what an instruct model was
  trained on); a plain-text prompt becomes one user message.
- "raw": the messages' contents joined as plain text, tokenized with the tokenizer's own special
  tokens (a base model's BOS, say).
- "auto": "chat" when the tokenizer has a chat template, else "raw".

`render_prompt` turns a program's prompt into a `RenderedPrompt`: the text the model saw (what the
inspector shows and the event log stores) carrying the messages it came from. `encode_prompt` is
the one place prompts become token ids; the sampler and the updater both call it, so they see the
same ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

Message = dict[str, str]
Prompt = str | Sequence[Message]
PromptFormat = Literal["auto", "chat", "raw"]
PROMPT_FORMATS = ("auto", "chat", "raw")


def chat_messages(system: str, user: str) -> list[Message]:
    """One module call as chat messages: the module's instructions, then its inputs.

    >>> chat_messages("Answer briefly.", "Question: 2 + 2?")
    [{'role': 'system', 'content': 'Answer briefly.'}, {'role': 'user', 'content': 'Question: 2 + 2?'}]
    """
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class RenderedPrompt(str):
    """The text a model saw for one call; `messages` are the chat messages it was rendered from
    (None for a raw-text prompt). Being a `str`, it is stored, hashed and compared as that text."""

    messages: tuple[Message, ...] | None

    def __new__(cls, text: str, messages: Sequence[Message] | None = None) -> RenderedPrompt:
        rendered = super().__new__(cls, text)
        rendered.messages = tuple(dict(m) for m in messages) if messages is not None else None
        return rendered


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def resolve_prompt_format(tokenizer: Any, prompt_format: str) -> Literal["chat", "raw"]:
    """'chat' or 'raw' for this tokenizer; 'chat' without a template is an error that says what to do."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {', '.join(PROMPT_FORMATS)}, not {prompt_format!r}.")
    if prompt_format == "auto":
        return "chat" if has_chat_template(tokenizer) else "raw"
    if prompt_format == "chat" and not has_chat_template(tokenizer):
        raise ValueError("prompt_format 'chat' needs a tokenizer with a chat template, and this model's has none "
                         "(a base model?): choose prompt_format 'raw' or 'auto'.")
    return prompt_format


def raw_text(prompt: Prompt) -> str:
    """A prompt as plain text: the messages' contents, one paragraph each, ending in a newline.

    >>> raw_text(chat_messages("Answer briefly.", "Question: 2 + 2?"))
    'Answer briefly.\\n\\nQuestion: 2 + 2?\\n'
    """
    if isinstance(prompt, str):
        return prompt
    text = "\n\n".join(m["content"].strip("\n") for m in prompt if m.get("content"))
    return text + "\n"


def as_messages(prompt: Prompt) -> list[Message]:
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]


def render_prompt(tokenizer: Any, prompt: Prompt, prompt_format: Literal["chat", "raw"]) -> RenderedPrompt:
    """What the model will see for `prompt` under a resolved format ('chat' or 'raw')."""
    if prompt_format == "raw":
        return RenderedPrompt(raw_text(prompt))
    messages = as_messages(prompt)
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return RenderedPrompt(text, messages)


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Prompt token ids. Messages (a list, or a `RenderedPrompt` rendered from them) give exactly
    `tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)`; text
    gives its plain tokenization with the tokenizer's own special tokens (e.g. Llama's BOS)."""
    messages = as_messages(prompt) if not isinstance(prompt, str) else getattr(prompt, "messages", None)
    if messages is not None:
        ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        return list(ids)
    return tokenizer(prompt, add_special_tokens=True)["input_ids"]


class FormattedProgram:
    """An `AgentProgram` whose prompts come out rendered for one tokenizer and format: the sampler
    and the updater get `RenderedPrompt`s (the text the model saw, with its messages). Everything
    else is the wrapped program's."""

    def __init__(self, program: Any, tokenizer: Any, prompt_format: Literal["chat", "raw"]):
        self.program, self.tokenizer, self.prompt_format = program, tokenizer, prompt_format

    def process_prompt(self, state: Any, agent: str) -> RenderedPrompt:
        return render_prompt(self.tokenizer, self.program.process_prompt(state, agent), self.prompt_format)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.program, name)
