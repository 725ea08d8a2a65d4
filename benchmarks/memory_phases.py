"""What each phase of `benchmarks/memory.py` runs: the batch, the "before" code paths reproduced from
the commit before the change, and `prepare`, which loads the model and builds the phase's work in the
child process (`benchmarks/memory_probe.py` measures it). See memory.py's docstring for the phases."""

from __future__ import annotations

import argparse
import os
import tempfile

import torch

PROMPTS = [  # chat prompts of 45-60 tokens with the shaped tokenizer (system + user, like a module call)
    [{"role": "system", "content": "Classify the banking question."},
     {"role": "user", "content": "I was charged twice for one payment."}],
    [{"role": "system", "content": "Solve it step by step."}, {"role": "user", "content": "12 apples, then 5 more?"}],
    [{"role": "system", "content": "Is the claim supported?"}, {"role": "user", "content": "The 1994 film won."}],
    [{"role": "system", "content": "Remove personal data."}, {"role": "user", "content": "I am Sara, sara@x.com."}],
]


# ---- The "before" code paths, reproduced from the previous commit --------------------------------


def old_sequence_logprobs(model, batch, *, temperature: float = 1.0, **_):
    """trainer.policy.logprobs.sequence_logprobs before the change: the model's full logits. -> (B, C)"""
    c_width = batch.completion_ids.shape[1]
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                logits_to_keep=c_width + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float()  # (B, C, V)
    if temperature != 1.0:
        logits = logits / temperature
    token_logits = logits.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    return token_logits - torch.logsumexp(logits, dim=-1)


def old_hf_backend(model, tok, batch_size: int):
    """The hf backend with the previous `_generate_chunk` (per-step logits kept, then stacked)."""
    from trainer.backends.base import Sample
    from trainer.backends.hf import HFBackend

    class OldHFBackend(HFBackend):
        def _generate_chunk(self, rows, device, temperature, top_p, top_k, max_new_tokens):
            width = max(len(r) for r in rows)
            input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, r in enumerate(rows):
                input_ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
                attention_mask[i, width - len(r):] = 1
            greedy = temperature == 0.0
            knobs = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": top_k or 0,
                                       "min_p": 0.0}
            out = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), do_sample=not greedy,
                **knobs, repetition_penalty=1.0, num_beams=1, max_new_tokens=max_new_tokens,
                eos_token_id=self.eos_id, pad_token_id=self.pad_id, return_dict_in_generate=True,
                output_logits=True)
            new_tokens = out.sequences[:, width:]
            logits = torch.stack(out.logits, dim=1).float()  # (B, L, V)
            if not greedy:
                logits = logits / temperature
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
            samples = []
            for ids, lps in zip(new_tokens.tolist(), logprobs.tolist(), strict=True):
                end = ids.index(self.eos_id) + 1 if self.eos_id in ids else len(ids)
                samples.append(Sample(text=self.tokenizer.decode(ids[:end], skip_special_tokens=True),
                                      token_ids=ids[:end], logprobs=lps[:end],
                                      finish_reason="stop" if self.eos_id in ids[:end] else "length"))
            return samples

    return OldHFBackend(model, tok, batch_size=batch_size)


# ---- One phase's setup, in the child process -----------------------------------------------------


def make_batch(tok, rows: int, new_tokens: int):
    """Per row: its prompt (messages), random completion ids (no special token), an advantage
    normalized within its group of rows/4 (GRPO). Seeded: every phase scores the same batch."""
    gen = torch.Generator().manual_seed(0)
    n = rows // len(PROMPTS)
    top = min(tok.convert_tokens_to_ids(t) for t in tok.all_special_tokens)  # specials sit at the top
    completions = torch.randint(0, top, (rows, new_tokens), generator=gen).tolist()
    rewards = torch.rand(len(PROMPTS), n, generator=gen)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten().tolist()
    prompts = [p for p in PROMPTS for _ in range(n)]  # prompt-major, as the sampler returns groups
    return prompts, completions, adv


def prepare(phase: str, args: argparse.Namespace, device: torch.device, dtype: torch.dtype):
    """Load the model and build everything the phase needs; return run(), the phase -> its stats."""
    from trainer.backends import get_backend
    from trainer.policy import PolicyExample, PolicyUpdater, UpdateConfig, load_policy_model

    trl = phase == "update/trl"
    # TRL turns gradient checkpointing on itself (below), Cohort's loader does it for Cohort.
    model, tok = load_policy_model(args.model_dir, device=device, dtype=dtype,
                                   gradient_checkpointing=args.gradient_checkpointing and not trl)
    n = args.rows // len(PROMPTS)
    if phase.startswith("sample/"):
        backend = (old_hf_backend(model, tok, args.rows) if phase == "sample/before"
                   else get_backend("hf", model=model, tokenizer=tok, batch_size=args.rows))
        # Warm-up: generate()'s first call imports and caches what it needs (tens of MiB, not the path's).
        backend.generate(PROMPTS[:1], 1, max_new_tokens=2, seed=1)

        def run():
            groups = backend.generate(PROMPTS, n, temperature=1.0, max_new_tokens=args.new_tokens, seed=0)
            lengths = [len(s.token_ids) for g in groups for s in g]
            return {"tokens": sum(lengths), "min_len": min(lengths), "max_len": max(lengths)}
        return run

    prompts, completions, adv = make_batch(tok, args.rows, args.new_tokens)
    # update/details: the same update with per-token details on (RunConfig.token_details's default top-k 5).
    cfg = UpdateConfig(micro_batch_size=args.rows, temperature=1.0,
                       token_topk=5 if phase == "update/details" else None)
    if not trl:
        if phase == "update/before":
            from trainer.policy import updater as cohort_updater
            cohort_updater.sequence_logprobs = old_sequence_logprobs  # updater.py calls it by this name
        updater = PolicyUpdater(model, tok, cfg)
        examples = [PolicyExample(p, "", a, completion_ids=c)
                    for p, c, a in zip(prompts, completions, adv, strict=True)]

        def run():
            stats = updater.update(examples)
            out = {"tokens": int(stats["completion_tokens"]), "loss": stats["loss"]}
            if cfg.token_topk is not None:  # the details really came out, one per row
                out["details"] = sum(d is not None for d in updater.last_token_details)
            return out
        return run

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trainer.rollouts.prompts import encode_prompt

    config = GRPOConfig(
        output_dir=os.path.join(tempfile.gettempdir(), "cohort-bench-trl"), report_to=[], use_vllm=False,
        use_cpu=device.type == "cpu", bf16=dtype == torch.bfloat16, fp16=False,
        per_device_train_batch_size=args.rows, num_generations=n, gradient_accumulation_steps=1, num_iterations=1,
        loss_type="dapo", beta=cfg.beta, epsilon=cfg.eps_low, epsilon_high=cfg.eps_high, temperature=cfg.temperature,
        max_completion_length=args.new_tokens, learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm, optim="adamw_torch", disable_dropout=False, seed=0, save_strategy="no",
        gradient_checkpointing=args.gradient_checkpointing, gradient_checkpointing_kwargs={"use_reentrant": False},
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                          args=config, train_dataset=Dataset.from_dict({"prompt": PROMPTS}), processing_class=tok)
    if config.gradient_checkpointing:  # what Trainer.train() does before its first step
        trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's training loop
    # The dict `_generate_and_score_completions` returns: left-padded prompts, completions, advantages.
    encoded = [encode_prompt(tok, p) for p in prompts]
    width = max(map(len, encoded))
    prompt_ids = torch.full((args.rows, width), tok.pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((args.rows, width), dtype=torch.long)
    for i, ids in enumerate(encoded):
        prompt_ids[i, width - len(ids):], prompt_mask[i, width - len(ids):] = torch.tensor(ids), 1
    completion_ids = torch.tensor(completions)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": torch.ones_like(completion_ids), "advantages": torch.tensor(adv),
              "num_items_in_batch": torch.tensor(float(completion_ids.numel()))}
    inputs = {k: v.to(device) for k, v in inputs.items()}
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def run():
        trainer.model.train()
        loss = trainer.compute_loss(trainer.model, inputs)
        trainer.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return {"tokens": int(inputs["completion_mask"].sum()), "loss": loss.detach().item()}
    return run
