"""Real writers of the formats Cohort imports: the `wandb` package in offline mode, TensorBoard's
SummaryWriter (torch's), and verl's file logger and rollout dumps in the format verl 0.9.1 writes them
(verl itself does not install beside Cohort: it pins transformers < 5.11 and needs ray), field for
field: `FileLogger.log` writes `{"step": N, "data": {...}}` lines, `_write_generations` one
`<step>.jsonl` per step with input, output, gts, score, step and the reward-extra keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WANDB_SCRIPT = r'''
import sys, wandb
root, steps = sys.argv[1], int(sys.argv[2])
run = wandb.init(project="trl-grpo", name="grpo smollm2", mode="offline", dir=root,
                 config={"learning_rate": 1e-5, "beta": 0.04, "num_generations": 3, "reward_weights": [1.0, 0.5]})
# transformers' WandbCallback puts train/* on train/global_step, as TRL runs do
run.define_metric("train/global_step")
run.define_metric("*", step_metric="train/global_step", step_sync=True)
for i in range(1, steps + 1):
    run.log({"train/reward": i / steps, "train/loss": 1.0 / i, "train/rewards/accuracy/mean": i % 2,
             "train/rewards/format/mean": 1.0, "train/global_step": i * 2})
    if i % 5 == 0:  # TRL's completions table: step, prompt, completion, a column per reward, advantage
        table = wandb.Table(columns=["step", "prompt", "completion", "accuracy", "format", "advantage"])
        for p in range(2):
            for g in range(3):
                table.add_data(i * 2, f"What is {p} + {p}?", f"answer {g} at {i}", float(g == p), 1.0,
                               0.6 - 0.3 * g)
        run.log({"completions": table})
run.summary["best_reward"] = 0.95
run.finish()
'''


def write_wandb_run(root: Path, steps: int = 20) -> Path:
    """A real W&B offline run under `root` (in its own process, as a training script would); its run file."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    subprocess.run([sys.executable, "-c", WANDB_SCRIPT, str(root), str(steps)], check=True, env=env,
                   capture_output=True, timeout=300)
    (file,) = root.glob("wandb/offline-run-*/run-*.wandb")
    return file


def run_wandb(root: Path, body: str) -> None:
    """`body` run with `run`, a W&B offline run under `root`, in its own process."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    script = ("import sys, wandb\nrun = wandb.init(project='p', mode='offline', dir=sys.argv[1])\n"
              + body + "\nrun.finish()\n")
    subprocess.run([sys.executable, "-c", script, str(root)], check=True, env=env, capture_output=True, timeout=300)


def write_tensorboard_log(root: Path, steps: int = 10) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(root))
    for i in range(steps):
        writer.add_scalar("train/reward", i * 0.25, i)
        writer.add_scalar("train/loss", 1.0 / (i + 1), i)
    writer.add_text("notes", "lr warm-up ends here", 3)
    writer.add_hparams({"lr": 1e-4, "optimizer": "adam", "batch_size": 8}, {"hparam/final_reward": 0.9}, run_name=".")
    writer.close()
    return root


def verl_log_line(step: int) -> bytes:
    return json.dumps({"step": step, "data": {"critic/score/mean": step / 10, "actor/entropy": 0.5,
                                              "response_length/mean": 100 + step}}).encode() + b"\n"


def verl_dump(step: int, prompts: int = 2, n: int = 3) -> str:
    lines = []
    for p in range(prompts):
        for g in range(n):
            lines.append(json.dumps({"input": f"Q{p}: 2+{p}=?", "output": f"answer {g} at {step}",
                                     "gts": str(2 + p), "score": float(g == 0), "step": step,
                                     "acc": float(g == 0), "format_ok": 1.0}, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def write_verl_step(root: Path, step: int) -> None:
    """verl's files for one step, in verl's order: the dump (from its writer thread), then the log line."""
    dumps = root / "rollouts"
    dumps.mkdir(parents=True, exist_ok=True)
    (dumps / f"{step}.jsonl").write_text(verl_dump(step), encoding="utf-8")
    with (root / "grpo-gsm8k.jsonl").open("ab") as log:
        log.write(verl_log_line(step))


def write_verl_run(root: Path, steps: int = 5) -> Path:
    for step in range(1, steps + 1):
        write_verl_step(root, step)
    return root


TRL_SCRIPT = r'''
import json, os, sys
from pathlib import Path
root, model = Path(sys.argv[1]), sys.argv[2]
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

def ends_with_period(completions, **kwargs):
    return [float(str(c).strip().endswith(".")) for c in completions]

def short(completions, **kwargs):
    return [float(len(str(c)) < 20) for c in completions]

config = GRPOConfig(output_dir=str(root / "out"), use_cpu=True, max_steps=3, report_to=["wandb"], run_name="trl tiny",
                    logging_steps=1, per_device_train_batch_size=4, num_generations=2, max_completion_length=6,
                    save_strategy="no", log_completions=True, disable_tqdm=True, dataloader_num_workers=0,
                    learning_rate=1e-4, beta=0.0, seed=0)
trainer = GRPOTrainer(model=model, reward_funcs=[ends_with_period, short], args=config,
                      train_dataset=Dataset.from_list([{"prompt": f"Repeat: word{i % 3}"} for i in range(16)]))
trainer.train()
import wandb
wandb.finish()
(root / "log_history.json").write_text(json.dumps(trainer.state.log_history))
'''


def write_trl_wandb_run(root: Path, model_path: Path) -> Path:
    """A real W&B offline run written by TRL's GRPOTrainer (`report_to=["wandb"]`, `log_completions=True`)
    training `model_path` for 3 steps on the CPU; TRL's own log history beside it (log_history.json)."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=str(root), WANDB_PROJECT="trl-toy", WANDB_SILENT="true",
               WANDB_DISABLE_GIT="true")
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", TRL_SCRIPT, str(root), str(model_path)], check=True, env=env,
                   capture_output=True, timeout=600)
    return root
