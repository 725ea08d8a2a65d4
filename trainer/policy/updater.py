"""LoRA policy update for the GRPO family (MMGRPO, MHGPO, GDPO all share this step).

Pieces, from the math outwards:

- `clipped_policy_loss` (trainer/algorithms/loss.py): the per-token clipped surrogate of GRPO (MMGRPO Eq. 1 and its per-module
  form Eq. 5; GDPO Eq. 3) with a k3 KL penalty and three ways to aggregate tokens.
- `tokenize_examples` (trainer/policy/batching.py) / `sequence_logprobs` (trainer/policy/logprobs.py): triples
  to padded tensors, and the per-token log-probs of the completions under a model, computed in
  bounded chunks of the vocabulary-wide logits.
- `lora_config` / `wrap_with_lora` / `load_policy_model` (trainer/policy/lora.py): the adapter of MMGRPO Section 5 (r=16, alpha=64, dropout 0.05 on
  q, k, v, o, up, down, gate).
- `PolicyUpdater`: the trainer's own old log-probs, the importance-sampling correction against the
  sampler's, AdamW on the LoRA parameters, LR schedule, micro-batches with gradient accumulation,
  grad-norm clipping, and a `state_dict` for exact resume.

Shapes: B = sequences in a (micro-)batch, P = padded prompt width, C = padded completion width,
V = vocabulary size. Log-prob tensors are completion-aligned, (B, C).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from peft import PeftModel
from torch import Tensor
from transformers import get_scheduler

from trainer.algorithms.loss import AGGREGATIONS, clipped_policy_loss  # noqa: F401 - AGGREGATIONS re-exported
from trainer.policy import distributed
from trainer.policy.batching import (  # noqa: F401 - re-exported: the policy's public names
    PolicyBatch,
    PolicyExample,
    as_example,
    encode_completion,
    encode_prompt,
    tokenize_examples,
)
from trainer.policy.logprobs import MismatchTotals, importance_weights, sequence_logprobs
from trainer.policy.lora import (  # noqa: F401 - re-exported: the policy's public names
    DEFAULT_LORA_TARGETS,
    _seeded,
    enable_gradient_checkpointing,
    load_policy_model,
    lora_config,
    lora_parameters,
    train_mode_dropout,
    wrap_with_lora,
)
from trainer.policy.sharding import is_sharded, pad_micro_batches
from trainer.policy.state import PolicyPersistence
from trainer.policy.token_details import DetailsSink, ExampleDetails, per_example_details
from trainer.policy.update_config import SCHEDULERS, UpdateConfig  # noqa: F401 - re-exported: the policy's public names

# --------------------------------------------------------------------------------------------------
# The updater
# --------------------------------------------------------------------------------------------------


class PolicyUpdater(PolicyPersistence):
    """One LoRA policy: AdamW on its adapter, an LR schedule, and `update(examples) -> stats`."""

    def __init__(self, model: PeftModel, tokenizer: Any, config: UpdateConfig | None = None, *,
                 ranks: distributed.Ranks = distributed.SINGLE) -> None:
        if not isinstance(model, PeftModel):
            raise TypeError("PolicyUpdater needs a PEFT model; wrap the base model with wrap_with_lora()")
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or UpdateConfig()
        params = lora_parameters(model)
        others = [n for n, p in model.named_parameters() if p.requires_grad and n not in params]
        if not params or others:
            raise ValueError(f"expected only LoRA parameters to be trainable; also trainable: {others[:5]}")
        self._params = list(params.values())
        self.ranks = ranks
        self.sharded = is_sharded(model)  # FSDP: collective forwards, gradients reduced by FSDP itself
        if not self.sharded:  # (a sharded model was made one adapter before it was sharded)
            distributed.broadcast_parameters(self._params, ranks)  # one adapter, whatever each rank drew
        cfg = self.config
        self.optimizer = torch.optim.AdamW(
            self._params, lr=cfg.learning_rate, betas=cfg.adam_betas, weight_decay=cfg.weight_decay
        )
        # transformers' own schedules (TRL's too), counted in optimizer steps; warmup works with each.
        self.scheduler = get_scheduler(
            "constant_with_warmup" if cfg.scheduler == "constant" else cfg.scheduler, self.optimizer,
            num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.total_steps)
        self.updates = 0  # update() calls
        self.optimizer_steps = 0
        # A training pass with dropout is not the policy the sampler drew from: its log-probs show the
        # dropout noise as a sampler mismatch, so the token details then come from an eval pass.
        self.train_dropout = train_mode_dropout(model)
        self._last_lr = self.scheduler.get_last_lr()[0]
        # Per example of the last update(), when config.token_topk is set: its per-token details
        # (trainer.policy.token_details.per_example_details), None for an example it did not score.
        self.last_token_details: list[ExampleDetails | None] = []

    @property
    def device(self) -> torch.device:
        return self._params[0].device

    def update(self, examples: Sequence[Any]) -> dict[str, float]:
        """One policy update on a batch of triples; returns scalar stats.

        Old log-probs (the denominator of the ratio) come from the training model, never from the
        sampler, whose kernels (vLLM's bf16) and truncation (top-k / top-p) differ. As in TRL:
        with one pass over the batch they are the training pass's own, detached (the ratio is
        exactly 1); with several passes, or an importance-sampling weight to compute, a no-grad
        eval-mode forward before the first optimizer step (with LoRA dropout 0 the first ratio is
        again exactly 1). The sampler's log-probs, where examples bring them, give the importance-
        sampling weights and the mismatch stats (`mismatch/...`, `is_weight/...`). Reference log-probs
        (adapter disabled, the same weights) only when beta > 0. Training passes use train mode, so
        LoRA dropout makes the ratio fluctuate slightly around 1.

        With `config.token_topk` set, each token's log-prob, entropy and top-k (`last_token_details`,
        one entry per example, in order; this rank's examples in a many-process run) come from a pass
        without dropout, the one the mismatch stats then use over every scored token, so the two
        measure the same thing: the eval pass of the old log-probs where there is one; else the first
        training pass when train mode has no dropout (no pass is added); else (LoRA dropout > 0, one
        pass over the batch) a no-grad eval pass for the details and the mismatch only, every
        micro-batch's instead of one's. The loss is the same with or without details.
        """
        cfg = self.config
        started = time.perf_counter()
        examples = [as_example(e) for e in examples]
        if not examples and not self.ranks.distributed:  # a rank may hold none of the batch's calls
            raise ValueError("update() needs at least one example")
        micro = [
            tokenize_examples(
                self.tokenizer,
                examples[i : i + cfg.micro_batch_size],
                max_context_length=cfg.max_context_length,
                append_eos=cfg.append_eos,
            ).to(self.device)
            for i in range(0, len(examples), cfg.micro_batch_size)
        ]
        real = micro
        if self.sharded:  # every rank runs as many forward passes as the busiest
            micro = pad_micro_batches(micro, self.ranks, self._empty_micro_batch)
        chunks = self._optimizer_chunks(micro)
        # The Dr. GRPO constant is one number for the whole batch (the sampler's max_new_tokens).
        max_len = cfg.dr_grpo_max_len or distributed.max_float(
            max((int(mb.completion_mask.sum(1).max()) for mb in micro), default=0), self.ranks)
        norms = [self._chunk_normalizers([micro[k] for k in chunk if k < len(real)], max_len) for chunk in chunks]
        num_tokens = distributed.sum_floats({"tokens": sum(float(mb.completion_mask.sum()) for mb in real)},
                                            self.ranks)["tokens"]

        totals: dict[str, float] = {}
        mismatch = MismatchTotals()
        steps = 0
        details = DetailsSink.maybe(len(micro), cfg.token_topk)  # per micro-batch, from a pass without dropout
        old_pass = self._needs_old_pass(micro, len(chunks))
        with _seeded(cfg.seed * 1_000_003 + self.updates, self.device):
            # Before the first optimizer step: from the second step on the ratio moves away from 1.
            # (The details only when asked for: these calls stay what they were without them.)
            frozen, refs = self._frozen_logprobs(micro, old=old_pass or (details is not None and self.train_dropout > 0),
                                                 **({"details": details} if details is not None else {}))
            # An eval pass for the details only leaves the loss's old log-probs the training pass's own.
            olds = frozen if old_pass else None
            train_details = details is not None and frozen is None
            if not train_details:
                self._record_mismatch(micro, frozen, mismatch)
            for epoch in range(cfg.num_iterations):
                for chunk, norm in zip(chunks, norms, strict=True):
                    # No eval pass (nor dropout): the first training pass's log-probs are the old ones, its details too.
                    takes_details = train_details and epoch == 0
                    sink = {"details": details, "indices": chunk} if takes_details else {}
                    step = self._optimizer_step([micro[k] for k in chunk], None if olds is None else [olds[k] for k in chunk],
                                                [refs[k] for k in chunk], norm, **sink)
                    steps += 1
                    for k, v in step.items():
                        totals[k] = totals.get(k, 0.0) + v
            if train_details:  # that pass's log-probs, as the eval pass's would be
                self._record_mismatch(micro, details.logprobs(), mismatch)
        self.model.eval()
        self.updates += 1
        self.last_token_details = per_example_details(real, details) if details is not None else []

        elapsed = time.perf_counter() - started
        stats = {k: v / max(steps, 1) for k, v in totals.items()}  # the mean optimizer step
        # Sums over the ranks: the loss and the token-weighted shares are parts of the whole batch's.
        summed = {k: v for k, v in stats.items() if k not in ("grad_norm", "skipped_steps")}
        all_tokens = sum(int(mb.attention_mask.sum()) for mb in real)
        summed.update(tokens=float(all_tokens), truncated=float(sum(mb.num_truncated for mb in real)),
                      tokens_per_s=all_tokens * cfg.num_iterations / max(elapsed, 1e-9))
        stats.update(distributed.sum_floats(summed, self.ranks))
        stats.update(
            self._mismatch_stats(mismatch),
            lr=self._last_lr,
            completion_tokens=num_tokens,
            seconds=distributed.max_float(elapsed, self.ranks),  # the step waits for the slowest rank
            rank_seconds=elapsed,
            update=float(self.updates),
            optimizer_steps=float(steps),
        )
        return stats

    def _optimizer_chunks(self, micro: list[PolicyBatch]) -> list[list[int]]:
        """The micro-batches of each optimizer step, in order: `gradient_accumulation_steps` of them
        (TRL's meaning), or all of them with 0. Every rank takes the same number of optimizer steps
        (its gradients are summed with the others' at each one), so a rank with fewer micro-batches
        has shorter or empty chunks at the end."""
        accumulate = self.config.gradient_accumulation_steps
        most = len(micro)
        if self.ranks.distributed and not self.sharded:  # (sharded: micro is padded to the same count)
            most = int(distributed.max_float(float(most), self.ranks))
        if not accumulate or most <= accumulate:
            return [list(range(len(micro)))]
        return [[k for k in range(start, start + accumulate) if k < len(micro)] for start in range(0, most, accumulate)]

    def _chunk_normalizers(self, chunk: list[PolicyBatch], max_len: float) -> dict[str, float]:
        """The loss normalizers of one optimizer step, over its micro-batches on every rank, so the
        accumulated micro-batch losses, summed over the ranks, are that step's batch loss."""
        counts = distributed.sum_floats({"tokens": sum(float(mb.completion_mask.sum()) for mb in chunk),
                                         "sequences": float(sum(mb.completion_mask.shape[0] for mb in chunk))},
                                        self.ranks)
        return {"num_tokens": max(counts["tokens"], 1.0), "num_sequences": max(counts["sequences"], 1.0),
                "max_len": max_len}

    def _mismatch_stats(self, mismatch: MismatchTotals) -> dict[str, float]:
        """The mismatch over the tokens every rank's sampler scored."""
        if self.ranks.distributed:
            merged = MismatchTotals()
            for sums, corrected in distributed.gather_values((mismatch.sums, mismatch.corrected), self.ranks):
                merged.merge(sums, corrected=corrected)
            mismatch = merged
        return mismatch.stats()

    def _needs_old_pass(self, micro: list[PolicyBatch], chunks: int) -> bool:
        """Whether the old log-probs need a pass of their own (TRL's rule). With one optimizer step
        over the batch, the training pass's own log-probs, detached, are the old policy's: the ratio
        is exactly 1, as GRPO requires, and an extra forward would buy nothing. A second step (several
        mini-batches, or num_iterations > 1) needs them frozen before the first optimizer step, and so
        does the importance-sampling weight of a sampler that is another engine."""
        cfg = self.config
        corrects = (cfg.importance_sampling_correction and not cfg.sampler_is_policy
                    and any(mb.sampler_logprobs is not None for mb in micro))
        needed = cfg.num_iterations > 1 or chunks > 1 or corrects
        if self.sharded:  # one rank's extra forward pass is every rank's
            return distributed.max_float(float(needed), self.ranks) > 0
        return needed

    def _empty_micro_batch(self) -> PolicyBatch:
        """A one-token batch that adds nothing (its completion mask is zero): a sharded rank with
        fewer micro-batches than another runs these so the collective forward passes pair up."""
        cfg = self.config
        mb = tokenize_examples(self.tokenizer, [PolicyExample(" ", " ", 0.0)], max_context_length=cfg.max_context_length,
                               append_eos=cfg.append_eos)
        mb.completion_mask = torch.zeros_like(mb.completion_mask)
        mb.sampler_logprobs = None
        return mb.to(self.device)

    def _frozen_logprobs(
        self, micro: list[PolicyBatch], *, old: bool = True, details: DetailsSink | None = None
    ) -> tuple[list[Tensor] | None, list[Tensor | None]]:
        """The trainer's log-probs without dropout (when `old`: the old ones, or the token details'
        pass, each micro-batch's details into `details` when given) and, when beta > 0, the
        reference's (the same weights, adapter disabled): no grad, eval mode, before any optimizer step."""
        cfg = self.config
        self.model.eval()
        olds, refs = [], []
        with torch.no_grad():
            for k, mb in enumerate(micro):
                if old:
                    olds.append(self._logprobs(mb, details, k))
                ref = None
                if cfg.beta > 0.0:
                    with self.model.disable_adapter():
                        ref = sequence_logprobs(self.model, mb, temperature=cfg.temperature)
                refs.append(ref)
        return (olds if old else None), refs

    def _record_mismatch(self, micro: list[PolicyBatch], olds: list[Tensor | None] | None,
                         mismatch: MismatchTotals) -> None:
        """Sampler / trainer mismatch against the trainer's log-probs without dropout, `olds`: the eval
        pass's, or a training pass's without dropout (the details' pass); otherwise (one pass, no
        details) a no-grad eval pass over the first micro-batch the sampler scored, a sample that
        bounds the diagnostic's cost. (A training pass with LoRA dropout would show its noise, about
        0.04 nats a token on the toy task, as if the sampler had drifted.)"""
        cfg = self.config
        scored = [k for k, mb in enumerate(micro) if mb.sampler_logprobs is not None]
        if olds is None and self.sharded:  # the same single forward pass on every rank
            sample = micro[scored[0] if scored else 0]
            self.model.eval()
            with torch.no_grad():
                trainer = sequence_logprobs(self.model, sample, temperature=cfg.temperature)
            if scored:
                mismatch.add(trainer, sample, corrected=False, cap=cfg.importance_sampling_cap)
            return
        if olds is None and scored:
            self.model.eval()
            with torch.no_grad():
                sample = micro[scored[0]]
                trainer = sequence_logprobs(self.model, sample, temperature=cfg.temperature)
            mismatch.add(trainer, sample, corrected=False, cap=cfg.importance_sampling_cap)
            return
        for k in scored:  # olds exist here: the eval pass above covered the other case
            mismatch.add(olds[k], micro[k], corrected=self._importance_weight(micro[k], olds[k]) is not None,
                         cap=cfg.importance_sampling_cap)

    def _logprobs(self, mb: PolicyBatch, details: DetailsSink | None, index: int) -> Tensor:
        """The policy's log-probs of `mb` (B, C); with a sink, their token details go to it as `index`."""
        if details is None:
            return sequence_logprobs(self.model, mb, temperature=self.config.temperature)
        return details.score(self.model, mb, self.config.temperature, index)

    def _importance_weight(self, mb: PolicyBatch, old: Tensor) -> Tensor | None:
        """TIS weights of one micro-batch, where they apply: another engine's log-probs, correction on."""
        cfg = self.config
        if mb.sampler_logprobs is None or not cfg.importance_sampling_correction or cfg.sampler_is_policy:
            return None
        return importance_weights(old, mb.sampler_logprobs, mb.completion_mask, cap=cfg.importance_sampling_cap)

    def _optimizer_step(
        self,
        micro: list[PolicyBatch],
        olds: list[Tensor] | None,
        refs: list[Tensor | None],
        norm: dict[str, float],
        *,
        details: DetailsSink | None = None,
        indices: Sequence[int] = (),
    ) -> dict[str, float]:
        """One optimizer step over `micro`; `details` (indexed by `indices`, each micro-batch's place
        in the update) receives the token details of this pass when it gives the old log-probs."""
        cfg = self.config
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        weighted = {"clip_low": 0.0, "clip_high": 0.0, "ratio": 0.0, "kl": 0.0}
        for k, (mb, ref) in enumerate(zip(micro, refs, strict=True)):
            new = self._logprobs(mb, details, indices[k] if details is not None else k)
            old = olds[k] if olds is not None else new.detach()
            weight = self._importance_weight(mb, old) if olds is not None else None
            loss, st = clipped_policy_loss(
                new, old, mb.advantages, mb.completion_mask,
                eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta, logp_ref=ref,
                aggregation=cfg.aggregation, is_weight=weight, **norm,
            )  # fmt: skip
            loss.backward()
            loss_sum += float(loss.detach())
            share = float(st["tokens"]) / norm["num_tokens"]
            for k in weighted:
                weighted[k] += float(st[k]) * share
        if not self.sharded:  # (FSDP reduce-scatters the sum itself)
            distributed.sum_gradients(self._params, self.ranks)  # the whole batch's gradient on every rank
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self._params, max_norm))
        self._last_lr = self.scheduler.get_last_lr()[0]
        skipped = not math.isfinite(grad_norm)
        if skipped:
            # A NaN/inf gradient would poison AdamW's moments for good; drop this step instead.
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
            self.optimizer_steps += 1
            # A run may take more optimizer steps than its schedule was sized for (a program with more
            # calls than rollouts); the rate then stays at the schedule's end instead of cosine rising again.
            if not self.config.total_steps or self.optimizer_steps <= self.config.total_steps:
                self.scheduler.step()
        return {
            "loss": loss_sum,
            **weighted,
            "clip_fraction": weighted["clip_low"] + weighted["clip_high"],
            "grad_norm": grad_norm,
            "skipped_steps": float(skipped),
        }
