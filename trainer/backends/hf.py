"""Sampling with transformers `generate` on the live PEFT policy (CPU or GPU, no extra install).

The backend holds the very PeftModel the `PolicyUpdater` trains, so after an update it samples with
the new adapter without any copy. Prompts are tokenized exactly as the trainer tokenizes them
(`trainer.rollouts.prompts.encode_prompt`: chat template or raw text) and left-padded, so a sample's tokens
line up with the trainer's.

Memory: generate keeps no per-step logits (`output_logits` would stack a (rows, new tokens, vocab)
float tensor: 40 GB for 64 rows x 1,024 tokens of a 151,936-token vocabulary). The sampled tokens'
log-probs, which feed the sampler / trainer mismatch metric, are taken on the fly by
`ChosenTokenLogprobs`, which holds one step's (rows,) log-normalizer and one step's logits.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import LogitsProcessor

from trainer.backends.base import Sample, validate_request
from trainer.rollouts.prompts import encode_prompt


class ChosenTokenLogprobs(LogitsProcessor):
    """Records log softmax(logits / temperature)[sampled token] for every generated token.

    generate() calls logits processors with the ids so far and the next token's logits, before its
    own temperature / top-k / top-p warpers (custom processors come first in transformers'
    list), so these are the raw logits. The token sampled from step t's logits shows up as the last
    id at step t + 1's call; `finish` takes the last step's. Kept: (rows,) values per step, and one
    step's (rows, vocab) log-probs until the next call (a copy: later warpers may write in place).
    """

    def __init__(self, temperature: float):
        self.temperature = temperature if temperature > 0 else 1.0
        self.steps: list[torch.Tensor] = []  # (rows,) float32 per generated token
        self._pending: torch.Tensor | None = None  # (rows, vocab) log-probs of the step in flight

    def _take(self, chosen: torch.Tensor) -> None:
        if self._pending is not None:
            self.steps.append(self._pending.gather(-1, chosen.unsqueeze(-1)).squeeze(-1))
            self._pending = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._take(input_ids[:, -1])
        self._pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """(rows, new tokens) log-probs, given generate's output sequences."""
        self._take(sequences[:, -1])
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros((sequences.shape[0], 0))


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a turn, as vLLM stops: the model's `generation_config.eos_token_id` (an id
    or a list) and the tokenizer's EOS, in that order. A model whose tokenizer and generation config
    disagree (SmolLM2's GGUF tokenizer names `<|im_start|>` as EOS, its turns end with `<|im_end|>`)
    would otherwise run past the end of every answer."""
    generation = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = list(generation) if isinstance(generation, (list, tuple)) else [generation]
    ids.append(tokenizer.eos_token_id)
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


# A generate call's KV cache is kept within this (RunConfig.hf_generate_rows = 0), and prompts are
# assumed to take at most PROMPT_ALLOWANCE tokens next to max_new_tokens.
KV_CACHE_BUDGET_BYTES = 2 << 30
PROMPT_ALLOWANCE = 1024
MAX_GENERATE_ROWS = 256


def default_generate_rows(model: Any, max_new_tokens: int, *, budget_bytes: int = KV_CACHE_BUDGET_BYTES) -> int:
    """Rows per generate call whose KV cache fits `budget_bytes`: one row of T tokens caches
    2 (keys, values) x layers x KV heads x head size x T values of the weights' dtype.

    SmolLM2-135M in float32 (30 layers, 3 KV heads of 64) with 24 new tokens: 2 x 30 x 3 x 64 x 1,048
    x 4 bytes = 48 MB a row, so 44 rows in 2 GiB.
    """
    config = model.get_base_model().config if hasattr(model, "get_base_model") else model.config
    config = getattr(config, "get_text_config", lambda: config)()
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    element = next(model.parameters()).element_size()
    per_row = 2 * config.num_hidden_layers * kv_heads * head_dim * (PROMPT_ALLOWANCE + max_new_tokens) * element
    return int(max(1, min(MAX_GENERATE_ROWS, budget_bytes // per_row)))


class HFBackend:
    """`SamplingBackend` over `model.generate`; `batch_size` rows (prompt x sample) per generate call."""

    name = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.adapter_version: int | None = None
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.eos_id = self.stop_ids[0] if self.stop_ids else None
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.lockstep = None  # a trainer.policy.sharding.Lockstep when the weights are sharded (FSDP)

    def update_adapter(
        self, adapter_path: str | os.PathLike[str] | None = None, *, version: int | None = None
    ) -> None:
        """Load adapter weights saved by `PolicyUpdater.save_adapter` into the model.

        Without a path there is nothing to do: the model object is shared with the updater.
        """
        if adapter_path is not None:
            from peft import PeftModel, set_peft_model_state_dict
            from peft.utils import load_peft_weights

            if not isinstance(self.model, PeftModel):
                raise TypeError("update_adapter(path) needs the backend's model to be a PEFT model")
            device = next(self.model.parameters()).device
            set_peft_model_state_dict(self.model, load_peft_weights(str(adapter_path), device=str(device)))
        self.adapter_version = version

    def generate(
        self,
        prompts: list[Any],
        n: int,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        max_new_tokens: int = 256,
        seed: int = 0,
    ) -> list[list[Sample]]:
        validate_request(prompts, n, temperature, top_p, max_new_tokens)
        rows = [encode_prompt(self.tokenizer, p) for p in prompts for _ in range(n)]  # prompt-major
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()  # no LoRA dropout while sampling
        samples: list[Sample] = []
        try:
            # One seeded stream for the whole call, without disturbing the caller's RNG.
            devices = [device] if device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                torch.manual_seed(seed)
                for start in range(0, len(rows), self.batch_size):
                    chunk = rows[start : start + self.batch_size]
                    samples.extend(
                        self._generate_chunk(chunk, device, temperature, top_p, top_k, max_new_tokens)
                    )
        finally:
            self.model.train(was_training)
        return [samples[i * n : (i + 1) * n] for i in range(len(prompts))]

    def finish_sampling(self) -> None:
        """With sharded weights, joins the other ranks' generate calls until every rank is done (see
        trainer.policy.sharding); otherwise nothing to do."""
        if self.lockstep is None:
            return
        device = next(self.model.parameters()).device
        one = torch.tensor([[self.pad_id]], device=device)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                self.lockstep.drain(lambda: self.model.generate(
                    input_ids=one, attention_mask=torch.ones_like(one), do_sample=False, max_new_tokens=1,
                    synced_gpus=True, pad_token_id=self.pad_id, eos_token_id=self.stop_ids))
        finally:
            self.model.train(was_training)

    def _generate_chunk(
        self,
        rows: list[list[int]],
        device: torch.device,
        temperature: float,
        top_p: float,
        top_k: int | None,
        max_new_tokens: int,
    ) -> list[Sample]:
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # (B, P) left-padded
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            attention_mask[i, width - len(r) :] = 1
        greedy = temperature == 0.0
        # Every sampling knob is passed explicitly: generate() fills unset ones from the model's
        # generation_config and then global defaults (top_k=50), which would change the distribution.
        # Greedy decoding ignores them, and passing them there only triggers a warning.
        knobs = (
            {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": top_k or 0, "min_p": 0.0}
        )
        recorder = ChosenTokenLogprobs(temperature)
        if self.lockstep is not None:
            self.lockstep.vote(True)
        out = self.model.generate(
            synced_gpus=self.lockstep is not None,
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            do_sample=not greedy,
            **knobs,
            repetition_penalty=1.0,
            num_beams=1,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            logits_processor=[recorder],
            return_dict_in_generate=True,
        )
        new_tokens = out.sequences[:, width:]  # (B, L)
        logprobs = recorder.finish(out.sequences)  # (B, L)

        samples = []
        stops = set(self.stop_ids)
        for ids, lps in zip(new_tokens.tolist(), logprobs.tolist(), strict=True):
            # generate() pads finished rows after their end of turn; keep up to and including it.
            end = next((i + 1 for i, tok in enumerate(ids) if tok in stops), None)
            finish = "length" if end is None else "stop"
            ids, lps = ids[:end], lps[:end]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            samples.append(Sample(text=text, token_ids=ids, logprobs=lps, finish_reason=finish))
        return samples
