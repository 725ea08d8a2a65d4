"""What each rank process of tests/trainer/policy/test_distributed.py runs (importable, so `spawn` can start
it). Every worker joins a gloo group of `world` processes through a shared file, computes its part
and writes its result to `out_dir/rank<r>.pkl` for the test to compare with one process's."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.algorithms.scoring import BatchScorer
from trainer.config import RunConfig
from trainer.policy import distributed
from trainer.policy.distributed import Ranks
from trainer.rewards import get_reward
from trainer.rollouts.sampling import LinearChain, fork_on_first, round_robin

AGENTS = ("rewriter", "answerer")
ANSWERS = ("answerer1", "answerer0")  # some completions match, some do not


def join(rank: int, world: int, init_file: str) -> Ranks:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    return Ranks(rank, world)


def fixed_rollouts(config: RunConfig):
    """The step's rollouts, the same in every process: a deterministic LM over 4 questions."""
    import numpy as np

    examples = [{"id": f"e{i}", "question": f"q{i}", "answer": ANSWERS[i % 2]} for i in range(config.examples_per_step)]
    ids = [e["id"] for e in examples]
    program = LinearChain(AGENTS)

    def generate(agent, prompts):  # completion k of each request: agent name + k mod 3
        return [f"{agent}{k % 3}" for k in range(len(prompts))]

    if config.strategy == "mhgpo":
        trajectories = round_robin(program, examples, group_size=config.group_size, probs=config.fork_probabilities,
                                   generate=generate, rng=np.random.default_rng([config.seed, 1, 1]), example_ids=ids)
    else:
        trajectories = fork_on_first(program, examples, group_size=config.group_size, generate=generate,
                                     example_ids=ids)
    return examples, ids, trajectories


def scorer_for(config: RunConfig) -> BatchScorer:
    return BatchScorer(config, {s.name: get_reward(s.name, **s.params) for s in config.rewards}, AGENTS)


def step_result(config: RunConfig, ranks: Ranks):
    """Scores this rank's shard, gathers the batch and computes groups, advantages and metrics."""
    examples, ids, trajectories = fixed_rollouts(config)
    mine = set(ids[ranks.shard(ids)])
    by_id = {e["id"]: e for e in examples if e["id"] in mine}
    scorer = scorer_for(config)
    local = scorer.score([t for t in trajectories if t.example_id in mine], by_id)
    gathered = distributed.gather(local, ranks)
    groups, rewards, advantages = scorer.groups_and_advantages(gathered, step=1)
    from trainer.algorithms.groups import assign_advantages

    assign_advantages(groups, advantages)
    metrics = scorer.metrics(gathered, groups, rewards, advantages, {})
    return {"groups": [g.to_dict() for g in groups], "advantages": advantages.tolist(), "metrics": metrics,
            "rollouts": [t.to_dict() for t in gathered]}


def groups_worker(rank: int, world: int, init_file: str, configs: list[dict], out_dir: str) -> None:
    """`step_result` of each config, one after the other in the same two processes (a spawn each would
    cost more than the step)."""
    ranks = join(rank, world, init_file)
    results = [step_result(RunConfig.from_dict(config), ranks) for config in configs]
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps(results))
    dist.destroy_process_group()


def update_examples():
    from trainer.policy import PolicyExample

    prompts = ["Repeat: apple\n", "Repeat: river\n", "Repeat: stone\n"]
    completions = ["apple", "a river bank", "x", "stone.", "river", "no"]
    return [PolicyExample(prompts[i % 3], c, adv) for i, (c, adv) in
            enumerate(zip(completions, [1.0, -0.5, 0.25, -1.0, 0.75, -0.25], strict=True))]


def lora_after_one_update(model_path: str, examples, ranks: Ranks, **update):
    """The LoRA weights after one update of `examples` (this rank's part of the batch)."""
    from trainer.policy import PolicyUpdater, UpdateConfig, load_policy_model
    from trainer.policy.lora import lora_parameters

    model, tokenizer = load_policy_model(model_path, seed=0, dropout=0.0)  # dropout masks depend on the batch
    updater = PolicyUpdater(model, tokenizer, UpdateConfig(learning_rate=1e-2, **update), ranks=ranks)
    stats = updater.update(examples)
    return {n: p.detach().clone() for n, p in lora_parameters(model).items()}, stats


def update_worker(rank: int, world: int, init_file: str, model_path: str, updates: list[dict], out_dir: str) -> None:
    """(weights, stats) after one update with each of `updates`, each from a freshly loaded model."""
    ranks = join(rank, world, init_file)
    examples = update_examples()
    # Uneven shards on purpose: rank 0 holds 4 calls, rank 1 holds 2.
    part = examples[:4] if rank == 0 else examples[4:]
    results = [lora_after_one_update(model_path, part, ranks, **update) for update in updates]
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps(results))
    dist.destroy_process_group()


def sharded_policy(model_path: str, ranks: Ranks):
    """The tiny model with its base weights sharded over the ranks (sharding = "fsdp")."""
    from trainer.policy import load_policy_model
    from trainer.policy.sharding import shard_base_weights

    model, tokenizer = load_policy_model(model_path, seed=0, dropout=0.0)
    shard_base_weights(model.get_base_model(), ranks, torch.device("cpu"))
    return model, tokenizer


def sharded_update_worker(rank: int, world: int, init_file: str, model_path: str, update: dict, out_dir: str) -> None:
    from trainer.policy import PolicyUpdater, UpdateConfig

    ranks = join(rank, world, init_file)
    model, tokenizer = sharded_policy(model_path, ranks)
    examples = update_examples()
    part = examples[:4] if rank == 0 else examples[4:]  # 2 micro-batches against 1: padded to pair up
    updater = PolicyUpdater(model, tokenizer, UpdateConfig(learning_rate=1e-2, **update), ranks=ranks)
    stats = updater.update(part)
    state = updater.state_dict()  # collective: the adapter gathered into full tensors
    weights = {name: value for name, value in state["adapter"].items()}
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps((weights, stats)))
    dist.destroy_process_group()


GENERATE_PROMPTS = ["Repeat: apple\n", "Repeat: river\n", "Repeat: stone\n", "Repeat: cloud\n"]


def sharded_generate_worker(rank: int, world: int, init_file: str, model_path: str, out_dir: str) -> None:
    """Rank 0 samples three prompts in three generate calls, rank 1 one prompt in one call."""
    from trainer.backends.hf import HFBackend
    from trainer.policy.sharding import Lockstep

    ranks = join(rank, world, init_file)
    model, tokenizer = sharded_policy(model_path, ranks)
    backend = HFBackend(model, tokenizer, batch_size=1)
    backend.lockstep = Lockstep(ranks)
    prompts = GENERATE_PROMPTS[:3] if rank == 0 else GENERATE_PROMPTS[3:]
    samples = backend.generate(prompts, 1, temperature=0.0, max_new_tokens=4 + 2 * rank)
    backend.finish_sampling()
    Path(out_dir, f"rank{rank}.pkl").write_bytes(pickle.dumps([s[0].text for s in samples]))
    dist.destroy_process_group()
