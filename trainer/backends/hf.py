"""Sampling with transformers `generate` on the live PEFT policy (CPU or GPU, no extra install).

The backend holds the very PeftModel the `PolicyUpdater` trains, so after an update it samples with
the new adapter without any copy. Prompts are tokenized exactly as the trainer tokenizes them
(`trainer.policy.encode_prompt`) and left-padded, so a sample's tokens and log-probs line up with
the trainer's recomputation.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainer.backends.base import Sample, validate_request
from trainer.policy import encode_prompt


class HFBackend:
    """`SamplingBackend` over `model.generate`; `batch_size` rows (prompt x sample) per generate call."""

    name = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.adapter_version: int | None = None
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

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
        prompts: list[str],
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
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            do_sample=not greedy,
            **knobs,
            repetition_penalty=1.0,
            num_beams=1,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.eos_id,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,  # raw logits: the log-probs below use logits / temperature only
        )
        new_tokens = out.sequences[:, width:]  # (B, L)
        logits = torch.stack(out.logits, dim=1).float()  # (B, L, V)
        if not greedy:
            logits = logits / temperature
        logprobs = (
            torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        )  # (B, L)

        samples = []
        for ids, lps in zip(new_tokens.tolist(), logprobs.tolist(), strict=True):
            # generate() pads finished rows after their EOS; keep up to and including the first EOS.
            end = ids.index(self.eos_id) + 1 if self.eos_id in ids else len(ids)
            finish = "stop" if self.eos_id in ids[:end] else "length"
            ids, lps = ids[:end], lps[:end]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            samples.append(Sample(text=text, token_ids=ids, logprobs=lps, finish_reason=finish))
        return samples
