"""Data-parallel training (trainer.policy.distributed): two gloo processes on this CPU compute exactly what
one process computes from the same rollouts (groups, advantages, metrics) and make the same update."""

from __future__ import annotations

import pickle

import pytest

from tests.trainer.rank_workers import lora_after_one_update, step_result, update_examples
from trainer.config import RunConfig
from trainer.policy.distributed import SINGLE, Ranks

pytestmark = pytest.mark.usefixtures("torch_setup")

TWO_REWARDS = [{"name": "exact_match"}, {"name": "char_f1", "weight": 0.5}]
CASES = {
    "mmgrpo-grpo": {"strategy": "mmgrpo", "estimator": "grpo"},
    "mmgrpo-gdpo": {"strategy": "mmgrpo", "estimator": "gdpo"},
    "mmgrpo-gdpo-batch-norm-off": {"strategy": "mmgrpo", "estimator": "gdpo", "gdpo_batch_norm": False},
    "mhgpo-round-robin": {"strategy": "mhgpo", "sampling": "rr", "fork_probabilities": [0.5, 0.5],
                          "rewards": [{"name": "char_f1"}]},
}


def on_ranks(target, world: int, tmp_path, *args) -> list:
    """Runs `target(rank, world, init_file, *args, out_dir)` in `world` spawned processes; their results."""
    import torch.multiprocessing as mp

    out = tmp_path / "out"
    out.mkdir()
    mp.start_processes(target, args=(world, str(tmp_path / "rendezvous"), *args, str(out)), nprocs=world,
                       start_method="spawn")
    return [pickle.loads((out / f"rank{r}.pkl").read_bytes()) for r in range(world)]


def test_a_rank_shard_is_contiguous_and_covers_the_batch():
    assert [Ranks(r, 2).shard(list(range(4))) for r in range(2)] == [slice(0, 2), slice(2, 4)]
    assert [list(range(7))[Ranks(r, 3).shard(range(7))] for r in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert SINGLE.shard(range(5)) == slice(0, 5)


def test_two_ranks_compute_the_groups_advantages_and_metrics_of_one_process(tmp_path):
    """Each case of CASES, all in one pair of rank processes."""
    from tests.trainer.rank_workers import groups_worker

    configs = {case: RunConfig.from_dict({
        "program": "toy", "group_size": 4, "rollouts_per_example": 4, "examples_per_step": 4,
        "rewards": TWO_REWARDS, "padding": "fill", **CASES[case]}) for case in sorted(CASES)}
    singles = {case: step_result(config, SINGLE) for case, config in configs.items()}
    for case, single in singles.items():
        assert single["groups"] and any(a != 0 for a in single["advantages"]), case  # a case worth comparing
    ranks = on_ranks(groups_worker, 2, tmp_path, [config.to_dict() for config in configs.values()])
    for results in ranks:
        for (case, single), result in zip(singles.items(), results, strict=True):
            assert result["rollouts"] == single["rollouts"], case
            assert result["groups"] == single["groups"], case
            assert result["advantages"] == pytest.approx(single["advantages"], abs=1e-12), case
            assert result["metrics"] == pytest.approx(single["metrics"], nan_ok=True), case


def test_two_ranks_make_the_update_of_one_process_over_the_whole_batch(tiny_model_path, tmp_path):
    """Token and sequence aggregation, both in one pair of rank processes."""
    from tests.trainer.rank_workers import update_worker

    updates = [{"micro_batch_size": 2, "aggregation": aggregation} for aggregation in ("token", "sequence")]
    singles = [lora_after_one_update(str(tiny_model_path), update_examples(), SINGLE, **u) for u in updates]
    ranks = on_ranks(update_worker, 2, tmp_path, str(tiny_model_path), updates)
    for results in ranks:
        for update, (single, single_stats), (weights, stats) in zip(updates, singles, results, strict=True):
            aggregation = update["aggregation"]
            assert weights.keys() == single.keys()
            for name, value in weights.items():
                assert value.allclose(single[name], atol=1e-6), (aggregation, name)
            for key in ("loss", "grad_norm", "completion_tokens", "tokens", "clip_fraction"):
                assert stats[key] == pytest.approx(single_stats[key], rel=1e-5, abs=1e-7), (aggregation, key)


def test_sharded_weights_make_the_same_update(tiny_model_path, tmp_path):
    """sharding = "fsdp": the base weights split over two ranks, uneven micro-batch counts (padded)."""
    from tests.trainer.rank_workers import sharded_update_worker

    update = {"micro_batch_size": 2, "aggregation": "token"}
    single, single_stats = lora_after_one_update(str(tiny_model_path), update_examples(), SINGLE, **update)
    ranks = on_ranks(sharded_update_worker, 2, tmp_path, str(tiny_model_path), update)
    assert ranks[1][0] == {}  # the gathered adapter lands on rank 0, the one that writes checkpoints
    weights = ranks[0][0]
    assert weights.keys() == single.keys()
    for name, value in weights.items():
        # 1e-5 against a step of 1e-2: Adam's first step is lr * sign(gradient), so a gradient within
        # rounding of zero (one element here) may move by a rounding's worth either way.
        assert value.allclose(single[name], atol=1e-5), name
    for _, stats in ranks:
        for key in ("loss", "grad_norm", "completion_tokens", "tokens"):
            assert stats[key] == pytest.approx(single_stats[key], rel=1e-5, abs=1e-7), key


def test_sharded_ranks_sample_what_one_process_samples_with_uneven_generate_calls(tiny_model_path, tmp_path):
    from tests.trainer.rank_workers import GENERATE_PROMPTS, sharded_generate_worker
    from trainer.backends.hf import HFBackend
    from trainer.policy import load_policy_model

    model, tokenizer = load_policy_model(tiny_model_path, seed=0, dropout=0.0)
    backend = HFBackend(model, tokenizer)
    expected = [[s[0].text for s in backend.generate(GENERATE_PROMPTS[:3], 1, temperature=0.0, max_new_tokens=4)],
                [s[0].text for s in backend.generate(GENERATE_PROMPTS[3:], 1, temperature=0.0, max_new_tokens=6)]]
    assert on_ranks(sharded_generate_worker, 2, tmp_path, str(tiny_model_path)) == expected
