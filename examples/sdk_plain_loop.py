"""A plain PyTorch policy-gradient loop streaming into Cohort with the SDK (no trainer framework).

The toy problem: shown a word, the policy answers two tokens, and is rewarded for repeating the word
(`content`) and for ending with a period (`format`). Each step samples a group of completions per
prompt and normalizes the rewards within the group (GRPO's advantage), so Cohort's group views work.

    COHORT_URL=http://127.0.0.1:8000 COHORT_TOKEN=<key from /api/tokens/> \\
        python examples/sdk_plain_loop.py --task toy_format --steps 40
"""

import argparse

import torch

import cohort

WORDS, ENDS = ["cat", "dog", "sun", "sky"], [".", "!", "?"]
TOKENS = WORDS + ENDS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="toy_format")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--mode", default=None, help="online (default) or offline")
    parser.add_argument("--dir", default=None, help="where the run's folder goes (default: ~/.cache/cohort/runs)")
    args = parser.parse_args()
    torch.manual_seed(0)
    policy = torch.nn.Embedding(len(WORDS), 2 * len(TOKENS))  # logits of both answer tokens, per word
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.1)
    config = {"lr": 0.1, "group_size": args.group_size, "words": WORDS}
    with cohort.init(task=args.task, name="plain loop", config=config, tags=["example"], mode=args.mode,
                     dir=args.dir, total_steps=args.steps) as run:
        for step in range(1, args.steps + 1):
            prompts = torch.arange(len(WORDS)).repeat_interleave(args.group_size)  # (P*G,)
            dist = torch.distributions.Categorical(logits=policy(prompts).view(-1, 2, len(TOKENS)))
            answer = dist.sample()  # (P*G, 2)
            content = (answer[:, 0] == prompts).float()
            fmt = (answer[:, 1] == TOKENS.index(".")).float()
            reward = (content + fmt).view(len(WORDS), args.group_size)  # (P, G)
            advantage = (reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-4)
            loss = -(advantage.flatten() * dist.log_prob(answer).sum(1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.log({"loss": loss.detach(), "reward/mean": reward.mean(), "reward/content": content.mean(),
                     "reward/format": fmt.mean(), "zero_var_share": (reward.std(1) == 0).float().mean()}, step=step)
            run.log_rollouts(step, [
                {"prompt": f"Repeat: {WORDS[p]}", "completion": " ".join(TOKENS[t] for t in answer[i].tolist()),
                 "rewards": {"content": content[i], "format": fmt[i]}, "reward": reward.flatten()[i],
                 "advantage": advantage.flatten()[i], "group": p, "example_id": WORDS[p]}
                for i, p in enumerate(prompts.tolist())])
        print(f"reward/mean {reward.mean().item():.2f} after {args.steps} steps")


if __name__ == "__main__":
    main()
