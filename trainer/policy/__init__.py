"""The policy: the LoRA-adapted model and its update.

- `lora`: the adapter of MMGRPO Section 5 and loading the policy model;
- `batching` and `logprobs`: (prompt, completion, advantage) triples to tensors, and per-token
  log-probs computed in bounded chunks of the vocabulary;
- `updater`: `PolicyUpdater`, the GRPO-family step (the loss is `trainer.algorithms.loss`);
- `state`: snapshots, checkpoints' policy state, and the saved adapter (`adapter_files`);
- `distributed` and `sharding`: many processes, one adapter, and base weights split across ranks.

`from trainer.policy import PolicyUpdater` (and the other names below) keeps working: the names are
served from their modules on first use, so importing a light module of this package (say
`trainer.policy.distributed`) does not load PEFT and transformers.
"""

from __future__ import annotations

from trainer._lazy import lazy_names

__all__, __getattr__ = lazy_names(__name__, {
    "trainer.policy.batching": ("PolicyBatch", "PolicyExample", "as_example", "encode_completion", "encode_prompt",
                                "tokenize_examples"),
    "trainer.policy.logprobs": ("MismatchTotals", "importance_weights", "sequence_logprobs",
                                "sequence_logprobs_with_details"),
    "trainer.policy.lora": ("DEFAULT_LORA_TARGETS", "enable_gradient_checkpointing", "load_policy_model",
                            "lora_config", "lora_parameters", "wrap_with_lora"),
    "trainer.algorithms.loss": ("AGGREGATIONS", "clipped_policy_loss"),
    "trainer.policy.state": ("PolicyPersistence",),
    "trainer.policy.sharding": ("is_sharded", "pad_micro_batches"),
    "trainer.policy.update_config": ("SCHEDULERS", "UpdateConfig"),
    "trainer.policy.updater": ("PolicyUpdater",),
})
