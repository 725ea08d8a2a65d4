"""The settings of a policy update (`trainer.policy.PolicyUpdater`): optimizer, clipping, KL, loss
aggregation, micro-batching, schedule and the sampler / trainer mismatch correction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.algorithms.loss import AGGREGATIONS

SCHEDULERS = ("constant", "linear", "cosine")


@dataclass
class UpdateConfig:
    """Hyper-parameters of one policy update (defaults: MMGRPO Section 5 where it states them)."""

    learning_rate: float = 1e-5
    """AdamW learning rate (MMGRPO: 1e-5)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay on the LoRA parameters."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    eps_low: float = 0.2
    """Lower clip range: ratios below 1 - eps_low stop pushing a negative-advantage token down."""
    eps_high: float = 0.2
    """Upper clip range; 0.28 with eps_low 0.2 is DAPO's clip-higher (GDPO App. E)."""
    beta: float = 0.0
    """KL coefficient against the adapter-free reference (MMGRPO: 0.01 for Qwen3, 0.04 for Llama 3.1)."""
    aggregation: str = "token"
    """'token' (DAPO), 'sequence' (GRPO as written in MMGRPO Eq. 1/5) or 'dr_grpo'; see clipped_policy_loss."""
    temperature: float = 1.0
    """Sampling temperature; log-probs are taken of softmax(logits / temperature) (MMGRPO: 0.6)."""
    micro_batch_size: int = 4
    """Sequences per forward/backward; gradients accumulate over micro-batches into one step."""
    gradient_accumulation_steps: int = 0
    """Micro-batches per optimizer step (TRL's meaning): a batch of M micro-batches takes
    ceil(M / gradient_accumulation_steps) optimizer steps per pass. 0: every micro-batch of the
    batch, one optimizer step per pass."""
    num_iterations: int = 1
    """Passes over the same batch (GRPO's mu, PPO epochs). With one pass of one optimizer step the
    ratio is 1 and clipping never binds."""
    max_grad_norm: float | None = 1.0
    """Clip the total gradient norm (MMGRPO: 0.1 for Qwen3, 0.5 for Llama 3.1); None disables."""
    scheduler: str = "constant"
    """'constant' (after warmup), 'linear' or 'cosine' (both decay to 0 at total_steps), as
    transformers' `get_scheduler` defines them."""
    warmup_steps: int = 0
    """Linear warmup over this many optimizer steps."""
    total_steps: int | None = None
    """Optimizer steps of the whole run; required by the cosine schedule."""
    max_context_length: int = 8192
    """Prompt + completion tokens per example (MMGRPO: 8192); longer pairs are cut."""
    dr_grpo_max_len: int | None = None
    """The Dr. GRPO constant: the sampler's max_new_tokens (Dr. GRPO's definition; TRL's
    max_completion_length). None falls back to the longest completion of each update batch."""
    importance_sampling_correction: bool = True
    """Re-weight each token by min(pi_trainer / pi_sampler, cap) where the sampler reported its
    log-probs (TRL's vllm_importance_sampling_correction, token-truncate mode)."""
    importance_sampling_cap: float = 2.0
    """The truncation cap of the importance-sampling weight."""
    sampler_is_policy: bool = False
    """The examples were sampled by this very model (the HF backend): its log-probs are the policy's
    own, so there is nothing to correct for. False for another engine (vLLM) or unknown samplers."""
    append_eos: bool = False
    """Append EOS to completions given as text only."""
    token_topk: int | None = None
    """Per-token details: None computes none; k >= 0 makes `update()` also record, for every example,
    its tokens' log-probs, entropies and k most likely tokens, from the pass that gives the old
    log-probs (`PolicyUpdater.last_token_details`)."""
    seed: int = 0
    """Seeds the dropout RNG of each update from (seed, update index), so a resumed run is exact."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes carried into the state dict (not used by the update)."""

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {SCHEDULERS}, got {self.scheduler!r}")
        if self.scheduler in ("linear", "cosine") and not self.total_steps:
            raise ValueError(f"scheduler={self.scheduler!r} needs total_steps (optimizer steps of the whole run)")
        if not (0.0 <= self.eps_low < 1.0) or self.eps_high < 0.0:
            raise ValueError(
                "clip ranges need 0 <= eps_low < 1 and eps_high >= 0 (typical: 0.2 and 0.2 or 0.28)"
            )
        if self.temperature <= 0.0:
            raise ValueError("temperature must be > 0; for greedy sampling train with temperature=1.0")
        if self.micro_batch_size < 1 or self.num_iterations < 1:
            raise ValueError("micro_batch_size and num_iterations must be >= 1")
        if self.gradient_accumulation_steps < 0:
            raise ValueError("gradient_accumulation_steps must be >= 0 (0: the whole batch per optimizer step)")
        if self.beta < 0.0:
            raise ValueError("beta must be >= 0 (0 disables the KL penalty and the reference pass)")
        if self.token_topk is not None and (isinstance(self.token_topk, bool) or not 0 <= self.token_topk <= 20):
            raise ValueError(f"token_topk must be None (no token details) or 0 to 20, got {self.token_topk!r}")
        if self.importance_sampling_cap < 1.0:
            raise ValueError("importance_sampling_cap must be >= 1 (TRL's default is 2 to 3)")
