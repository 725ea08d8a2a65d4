"""The "prompts" group of `RunConfig`'s fields: phase 1, prompt optimization of a DSPy program
before its weights train (trainer/dspy/prompt_phase.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.config.fields import (
    _DEMO_PHASE,
    _DSPY_ONLY,
    _PROMPT_PHASE,
    _PROPOSER_PHASE,
    ConfigError,
    PromptOptimizer,
    _meta,
)


@dataclass
class PromptFields:
    """Phase 1's optimizer and budget; a base of `RunConfig`. Their choices and the whole-number
    budget are checked with every field's in `RunConfig._check_choices` / `_check_numbers`."""

    prompt_optimizer: PromptOptimizer = field(default="none", metadata=_meta(
        "Optimize prompts first (DSPy programs): phase 1 runs DSPy's MIPROv2 (auto budget light or medium), "
        "GEPA, or BootstrapFewShotWithRandomSearch ('bootstrap_rs': few-shot demos only, no proposed "
        "instructions, the kind of prompt a small model gains most from) on the train split, scored by the "
        "run's rewards; phase 2 trains the weights of the optimized program (BetterTogether, MMGRPO paper "
        "Sec. 4). 'none': train the prompts as they are.",
        "prompts", when=_DSPY_ONLY))
    prompt_optimizer_model: str | None = field(default=None, metadata=_meta(
        "The model that proposes instructions (and reflects, for GEPA). Empty: the policy model itself, "
        "sampled by the run's backend.", "prompts", when=_PROPOSER_PHASE))
    prompt_optimizer_trials: int = field(default=0, metadata=_meta(
        "Phase 1's budget: MIPROv2 trials (and instruction candidates), GEPA metric calls per validation "
        "row, bootstrap_rs candidate demo sets; demos are then bootstrapped from eval_size train rows. 0: "
        "the optimizer's own budget for 'light' / 'medium' (GEPA: light; bootstrap_rs: 16 candidates). "
        "Candidates are always scored on eval_size rows held out of the train split, never on the dev set.",
        "prompts", when=_PROMPT_PHASE, bounds=">= 0"))
    prompt_optimizer_demos: int = field(default=4, metadata=_meta(
        "Bootstrapped demos per module at most: runs of the program itself on train rows that earned the "
        "full score (every reward at its maximum), shown as earlier turns of the conversation.",
        "prompts", when=_DEMO_PHASE, bounds=">= 0"))
    prompt_optimizer_labeled_demos: int = field(default=4, metadata=_meta(
        "Labeled demos per module at most: train rows shown as they are, for the modules whose inputs and "
        "outputs the rows carry (0: none).", "prompts", when=_DEMO_PHASE, bounds=">= 0"))

    def check_prompt_program(self, *, optimizes_prompts: bool) -> None:
        """Phase 1 optimizes a DSPy program's prompts: known only once the program is resolved (the web
        app's launch check and the trainer's composition root both ask here)."""
        if self.prompt_optimizer != "none" and not optimizes_prompts:
            raise ConfigError("prompt_optimizer", f"Program {self.program!r} is not a DSPy program: only a DSPy "
                              "program's prompts can be optimized first. Choose 'none'.")
