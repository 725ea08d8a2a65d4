"""Per-token details of a step's module calls (trainer/run/token_details.py, RunConfig.token_details) on
the tiny model, end to end through the Trainer: every call's `tokens` as the data contract shapes them
(the sampler's log-probs are the backend's own numbers), `sampled` keeps only each group's best and
worst, `off` computes and stores nothing, a program without sampled tokens still gets the update's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.trainer.run.test_loop import ListReporter, toy_config

pytestmark = pytest.mark.usefixtures("torch_setup")

TOKEN_METRICS = ("tokens/entropy/mean", "tokens/entropy/p10", "tokens/entropy/p50", "tokens/entropy/p90",
                 "tokens/entropy/best", "tokens/entropy/worst", "tokens/mismatch/share", "tokens/mismatch/max",
                 "tokens/prob/mean")


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def one_step(tmp_path, model_cache, *, before_run=None, **changes):
    """(trainer, the step event) of a one-step toy run with group_size 4 x 4 examples."""
    from trainer.run.loop import Trainer

    reporter = ListReporter()
    trainer = Trainer(toy_config(steps=1, checkpoint_every=0, **changes), tmp_path / "run", reporter,
                      model_cache_dir=model_cache)
    if before_run is not None:
        before_run(trainer)
    assert trainer.run() == "succeeded"
    (event,) = reporter.events
    return trainer, event


def calls_of(event):
    calls = {}
    for rollout in event["rollouts"]:
        for call in rollout["calls"]:
            calls.setdefault(call["call_id"], call)
    return calls


def record_samples(trainer):
    """Keeps every sample the backend returns: the numbers it reported."""
    samples, real = {}, trainer.parts.backend.generate

    def generate(prompts, n, **kwargs):
        out = real(prompts, n, **kwargs)
        for prompt, group in zip(prompts, out, strict=True):
            for sample in group:
                samples[(str(prompt), sample.text)] = sample
        return out

    trainer.parts.backend.generate = generate
    trainer.recorded = samples


def test_every_call_carries_its_tokens_and_the_step_its_token_metrics(tmp_path, model_cache):
    trainer, event = one_step(tmp_path, model_cache, before_run=record_samples, token_topk=3, token_fork_share=0.2)
    calls = calls_of(event)
    assert len(calls) == 16 and all("tokens" in c for c in calls.values())
    every_entropy = [e for c in calls.values() for e in c["tokens"]["entropy"]]
    threshold = np.quantile(every_entropy, 1 - 0.2)  # forks: the step's top 20% of token entropies
    for call in calls.values():
        tokens = call["tokens"]
        sample = trainer.recorded[(call["prompt"], call["completion"])]
        n = len(sample.token_ids)
        assert set(tokens) - {"bytes"} == {"pieces", "sampler", "trainer", "entropy", "topk"}
        assert len(tokens["pieces"]) == len(tokens["sampler"]) == len(tokens["trainer"]) == len(tokens["entropy"]) == n
        # Each sampled token decoded on its own, special tokens kept; the HF backend's own log-probs.
        assert tokens["pieces"] == trainer.parts.tokenizer.batch_decode([[i] for i in sample.token_ids],
                                                                  skip_special_tokens=False)
        assert tokens["sampler"] == [round(x, 4) for x in sample.logprobs]
        # The sampler is the policy itself here (eval mode; the fresh adapter is zero): the same numbers.
        assert tokens["trainer"] == pytest.approx(tokens["sampler"], abs=2e-4)
        assert all(e > 0 for e in tokens["entropy"])
        for pos, alternatives, sampled_id in tokens["topk"]:
            assert 0 <= pos < n and len(alternatives) == 3 and sampled_id == sample.token_ids[pos]
            probs = [a[1] for a in alternatives]
            assert probs == sorted(probs, reverse=True) and all(isinstance(a[0], str) for a in alternatives)
            # Each alternative's token id: its piece is that id decoded on its own.
            assert [a[0] for a in alternatives] == trainer.parts.tokenizer.batch_decode([[a[2]] for a in alternatives],
                                                                                  skip_special_tokens=False)
        assert [fork[0] for fork in tokens["topk"]] == [i for i, e in enumerate(tokens["entropy"]) if e >= threshold]
    metrics = event["metrics"]
    assert all(math.isfinite(metrics[key]) for key in TOKEN_METRICS)
    assert metrics["tokens/mismatch/max"] < 1e-3 and metrics["tokens/mismatch/share"] == 0.0
    assert not any(key.startswith("tokens/entropy/mean/") for key in metrics)  # one module: no per-module names
    assert metrics["tokens/entropy/mean"] == pytest.approx(np.mean(every_entropy), abs=1e-4)


def test_sampled_keeps_the_arrays_of_each_groups_best_and_worst_member_and_every_tokens_metrics(
        tmp_path, model_cache):
    _, every = one_step(tmp_path / "all", model_cache)
    _, sampled = one_step(tmp_path / "sampled", model_cache, token_details="sampled")
    calls = calls_of(sampled)
    kept = {cid for cid, c in calls.items() if "tokens" in c}
    extremes = set()
    for group in sampled["groups"]:
        rewards = [m["reward"] for m in group["members"]]
        best = group["members"][int(np.argmax(rewards))]["call_id"]
        worst = group["members"][int(np.argmin(rewards))]["call_id"]
        extremes |= {best, worst}
    assert kept == extremes and 0 < len(kept) < len(calls)
    for cid in kept:
        assert calls[cid]["tokens"] == calls_of(every)[cid]["tokens"]
    # The metrics come from every scored token either way.
    for key in TOKEN_METRICS:
        assert sampled["metrics"][key] == pytest.approx(every["metrics"][key])


def test_off_computes_and_stores_nothing_per_token(tmp_path, model_cache):
    trainer, event = one_step(tmp_path, model_cache, token_details="off")
    assert trainer.parts.updater.config.token_topk is None and trainer.parts.updater.last_token_details == []
    assert trainer.token_details is None
    assert not any("tokens" in c for c in calls_of(event).values())
    assert not any(key.startswith("tokens/") for key in event["metrics"])


def test_a_program_with_no_sampled_tokens_gets_the_updates_details(tmp_path, model_cache):
    """A generate that returns text only (no sample kept): the calls carry the tokens the update
    scored (the completion as it tokenized it), without the sampler's log-probs."""

    def text_only(trainer):
        trainer.sampler.generate_fn = lambda step, **_: lambda agent, prompts: [" apple." for _ in prompts]

    trainer, event = one_step(tmp_path, model_cache, before_run=text_only)
    for call in calls_of(event).values():
        tokens = call["tokens"]
        assert "sampler" not in tokens
        assert "".join(tokens["pieces"]) == " apple."
        assert len(tokens["trainer"]) == len(tokens["entropy"]) == len(tokens["pieces"])
    assert "tokens/mismatch/share" not in event["metrics"] and "tokens/prob/mean" in event["metrics"]


def test_a_cut_completions_tokens_have_no_trainer_values_past_the_cut():
    from trainer.run.token_details import CallRecord, call_tokens

    details = {"logprobs": np.array([-0.5, -1.25, -2.0], dtype=np.float32),
               "entropy": np.array([0.1, 2.5, 0.3], dtype=np.float32),
               "topk_ids": np.array([[7, 8], [8, 7], [9, 7]]), "topk_probs": np.array([[0.9, 0.1], [0.5, 0.4], [0.8, 0.1]])}
    record = CallRecord("c0", "echo", [7, 8, 9, 10, 11], [-0.5, -1.3, -2.0, -0.1, -0.123456], details)
    pieces = {7: "a", 8: "b", 9: "c", 10: "d", 11: "<|im_end|>"}
    tokens = call_tokens(record, pieces, threshold=1.0)
    assert tokens == {
        "pieces": ["a", "b", "c", "d", "<|im_end|>"],
        "sampler": [-0.5, -1.3, -2.0, -0.1, -0.1235],
        "trainer": [-0.5, -1.25, -2.0, None, None],
        "entropy": [0.1, 2.5, 0.3, None, None],
        "topk": [[1, [["b", 0.5, 8], ["a", 0.4, 7]], 8]],
    }


def test_byte_tokens_carry_their_bytes_and_forks_their_ids():
    from trainer.run.token_details import CallRecord, call_tokens

    # "😀" (F0 9F 98 80) as two byte tokens, 20 and 21; at token 1 the policy weighed 21 against 22 (98 81).
    details = {"logprobs": np.array([-0.1, -0.7], dtype=np.float32), "entropy": np.array([0.1, 1.5], dtype=np.float32),
               "topk_ids": np.array([[20, 3], [21, 22]]), "topk_probs": np.array([[0.9, 0.1], [0.5, 0.45]])}
    record = CallRecord("c0", "echo", [20, 21], None, details)
    pieces = {3: "a", 20: "\ufffd", 21: "\ufffd", 22: "\ufffd"}
    tokens = call_tokens(record, pieces, threshold=1.0, hexes={20: "f09f", 21: "9880", 22: "9881"})
    assert tokens["bytes"] == [[0, "f09f"], [1, "9880"]]
    assert tokens["topk"] == [[1, [["\ufffd", 0.5, 21, "9880"], ["\ufffd", 0.45, 22, "9881"]], 21]]
