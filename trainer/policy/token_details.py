"""Per-token details of the completions a policy update scores: each token's log-prob, the entropy
of the policy's token distribution there and its k most likely tokens, taken from a pass without
dropout: the one that gives the update's old log-probs, or an eval pass of their own where the
training pass has LoRA dropout (`PolicyUpdater.update` with `UpdateConfig.token_topk` set).

`DetailsSink.score` is the updater's log-prob call for that pass, keeping its details;
`per_example_details` cuts them into one entry per example, over the tokens the update scored (a
completion cut to fit max_context_length has fewer than were sampled).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor

from trainer.policy.batching import PolicyBatch
from trainer.policy.logprobs import sequence_logprobs_with_details

# One example's details over its n scored completion tokens: "logprobs" (n,) float32, the trainer's
# log softmax(logits / T)[token]; "entropy" (n,) float32, nats; "topk_ids" (n, k) int64 and
# "topk_probs" (n, k) float32, the k most likely tokens and their probabilities, descending.
ExampleDetails = dict[str, np.ndarray]


class DetailsSink:
    """The token details of each micro-batch of one update, by its index in the update's list."""

    def __init__(self, count: int, topk: int):
        self.topk = topk
        self.batches: list[tuple[Tensor, Tensor, Tensor, Tensor] | None] = [None] * count

    @classmethod
    def maybe(cls, count: int, topk: int | None) -> DetailsSink | None:
        """A sink when details are asked for (`topk` not None), else None: nothing is computed."""
        return None if topk is None else cls(count, topk)

    def score(self, model: Any, batch: PolicyBatch, temperature: float, index: int) -> Tensor:
        """`sequence_logprobs` of `batch` (with its autograd graph), its details kept as
        `batches[index]` with the detached log-probs. -> (B, C)"""
        logprobs, entropy, ids, probs = sequence_logprobs_with_details(model, batch, temperature=temperature,
                                                                       topk=self.topk)
        self.batches[index] = (logprobs.detach(), entropy, ids, probs)
        return logprobs

    def logprobs(self) -> list[Tensor | None]:
        """Each micro-batch's detached log-probs (B, C), None where it was not scored."""
        return [None if scored is None else scored[0] for scored in self.batches]


def per_example_details(batches: list[PolicyBatch], sink: DetailsSink) -> list[ExampleDetails | None]:
    """One entry per example of `batches` (the update's micro-batches in order, so the examples'
    order): its details over its scored tokens, None where its micro-batch was not scored."""
    out: list[ExampleDetails | None] = []
    for batch, scored in zip(batches, sink.batches, strict=False):
        rows = batch.completion_mask.shape[0]
        if scored is None:
            out.extend([None] * rows)
            continue
        lengths = batch.completion_mask.sum(-1).long().tolist()  # the mask is 1 on a prefix of each row
        logprobs, entropy, ids, probs = (t.detach().to("cpu") for t in scored)
        for r, n in enumerate(lengths):
            out.append({"logprobs": logprobs[r, :n].float().numpy(), "entropy": entropy[r, :n].float().numpy(),
                        "topk_ids": ids[r, :n].numpy(), "topk_probs": probs[r, :n].float().numpy()})
    return out
