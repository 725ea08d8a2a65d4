"""Time one full training step of Cohort against TRL's GRPOTrainer, same model, batch and math.

A step on both sides = sample G completions for each of P prompts (transformers `generate`, no vLLM),
reward them, group-normalize the rewards, one AdamW step on the LoRA adapter. Both sides get:
the same weights (one model folder, loaded twice; the adapter from `trainer.policy.wrap_with_lora`
with the same seed, so identical initial LoRA weights), the same chat messages rendered by the same
tokenizer's chat template, G, P, max new tokens, temperature (top-p 1, top-k off), LoRA r=16
alpha=64 dropout 0.05 on q/k/v/o/up/down/gate, micro-batch size (TRL's per-device batch) with the
whole step's P x G completions accumulated into one optimizer step, beta 0, clip 0.2, DAPO token
aggregation (Cohort "token" = TRL loss_type "dapo"), grad-norm clip 1, constant LR, the dtype,
gradient checkpointing on or off, and a cheap reward (character F1 against the example's answer).

The steps alternate (TRL step k, then Cohort step k, inside a TRL callback), so a noisy shared
machine slows both alike. TRL's step is timed from `on_step_begin` to `on_step_end` (generation,
rewards, advantages, forward/backward of every micro-batch, clip, optimizer); Cohort's is
`Trainer.train_step`. Warm-up steps are dropped, then medians. Nothing is downloaded.

Both sides take the old log-probs from the training pass itself when one pass is made over a batch
the policy sampled (TRL: num_iterations = 1 without vLLM); Cohort also runs one micro-batch through
a no-grad eval pass for its sampler / trainer mismatch chart. The report shows what a separate
old-log-prob pass costs (0 here) and how many log-prob forward passes each side ran.

CPU, tiny model (about 30 s):
    .venv/bin/python benchmarks/trl_step.py --prompts 4 --group-size 8 --max-new-tokens 16 --steps 40 --warmup 3

CPU, the real SmolLM2-135M-Instruct (about 5 minutes):
    .venv/bin/python benchmarks/trl_step.py --model builtin:smollm2-135m-instruct --prompts 4 --group-size 8 \
        --max-new-tokens 24 --micro-batch-size 16 --steps 6 --warmup 1 --threads 0

GPU, Qwen2.5-1.5B shape in bf16 at the GDPO tool-calling shape (4 rollouts, ~300-token prompts,
1,024 new tokens; random weights rarely emit EOS, so completions run to full length; on CUDA TRL's
fused LM head already scores only completion positions, so --trl-head changes nothing there):
    .venv/bin/python benchmarks/trl_step.py --shape qwen2.5-1.5b --device cuda --dtype bfloat16 \
        --prompts 8 --group-size 4 --prompt-tokens 300 --max-new-tokens 1024 --micro-batch-size 8 \
        --steps 3 --warmup 1 --threads 0

GPU, 8B shape with gradient checkpointing (two bf16 copies, ~33 GB; fits an H100):
    .venv/bin/python benchmarks/trl_step.py --shape llama3.1-8b --device cuda --dtype bfloat16 \
        --gradient-checkpointing --prompts 4 --group-size 4 --prompt-tokens 300 --max-new-tokens 1024 \
        --micro-batch-size 4 --steps 3 --warmup 1 --threads 0
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

from trainer.config import LORA_TARGETS, SMOLLM2_MODEL, RunConfig  # noqa: E402
from trainer.programs.toolcall import DEFAULT_SYSTEM  # noqa: E402
from trainer.programs.toy import ToyEcho  # noqa: E402
from trainer.rewards.text import char_f1  # noqa: E402
from trainer.rollouts.prompts import chat_messages, encode_prompt  # noqa: E402

TARGET_RATIO = 1.1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="timed steps per side (after the warm-up)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    p.add_argument("--group-size", type=int, default=8, help="G: completions per prompt")
    p.add_argument("--prompts", type=int, default=4, help="P: prompts per step")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--micro-batch-size", type=int, default=8, help="completions per forward/backward (both sides)")
    p.add_argument("--prompt-tokens", type=int, default=0,
                   help="0: the toy program's prompt (system 'Repeat the word.', user 'Repeat: apple'); N: the "
                        "toolcall program with a tool-list system prompt padded to about N tokens")
    p.add_argument("--shape", default=None, help="a trainer.models.shaped shape (qwen2.5-1.5b, llama3.1-8b, "
                   "qwen3-8b, ...); default: the tiny local Llama")
    p.add_argument("--hidden-size", type=int, default=None, help="narrow the shape (e.g. 64 on a CPU)")
    p.add_argument("--num-layers", type=int, default=None, help="cut the shape's depth")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads on both sides (0: torch's default). 1 on a shared CPU: tiny ops "
                        "gain nothing from threads and lose a lot to contention")
    p.add_argument("--learning-rate", type=float, default=1e-5)
    p.add_argument("--trl-head", choices=("compact", "stock"), default="compact",
                   help="TRL's fused LM head scores only the completion positions on CUDA (Triton) but every "
                        "prompt and completion position elsewhere. 'compact' (default) gives it the CUDA behaviour "
                        "on a CPU too, so a CPU run is not slowed by a CPU-only fallback; 'stock' leaves TRL as is")
    p.add_argument("--model-dir", default=None, help="where to build / reuse the model folder")
    p.add_argument("--model", default=None, choices=(SMOLLM2_MODEL,),
                   help="a built-in real model instead of the tiny one or a --shape (built once into the model cache)")
    args = p.parse_args()
    total = args.prompts * args.group_size
    if total % args.micro_batch_size:
        p.error(f"--micro-batch-size must divide prompts x group size ({total}): TRL accumulates whole micro-batches")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no GPU")
    return args


# --- the shared model, prompts and reward ---------------------------------------------------------
def build_model(args: argparse.Namespace) -> Path:
    dtype = getattr(torch, args.dtype)
    if args.model == SMOLLM2_MODEL:
        from trainer.models import ensure_smollm2

        return ensure_smollm2()
    if args.shape is None:
        from trainer.models import build_tiny_model

        folder = args.model_dir or Path(tempfile.gettempdir()) / "cohort-trl-bench-tiny"
        # The toy program's words in the tokenizer corpus, as Cohort's `builtin:tiny` does for "toy".
        return build_tiny_model(folder, corpus=ToyEcho.tokenizer_corpus, seed=0)
    from trainer.models.shaped import build_shaped_model

    name = f"cohort-trl-bench-{args.shape}-h{args.hidden_size or 'full'}-l{args.num_layers or 'full'}-{args.dtype}"
    folder = args.model_dir or Path(tempfile.gettempdir()) / name
    return build_shaped_model(folder, args.shape, hidden_size=args.hidden_size, num_layers=args.num_layers,
                              dtype=dtype, seed=0)


def make_examples(args: argparse.Namespace, tokenizer, count: int) -> list[dict]:
    """Rows both sides train on: the toy program's examples, or toolcall rows with long prompts."""
    if not args.prompt_tokens:
        return [{"id": f"toy-{i}", "word": "apple", "answer": "apple"} for i in range(count)]
    tools, system = [], DEFAULT_SYSTEM + "\nTools:"
    while len(encode_prompt(tokenizer, chat_messages(system, "Request 0: ?"))) < args.prompt_tokens:
        k = len(tools)
        tools.append(f'{{"name": "lookup_{k}", "description": "Looks up record {k} of the catalogue and returns its '
                     f'fields.", "parameters": {{"id": {{"type": "string"}}}}}}')
        system = DEFAULT_SYSTEM + "\nTools:\n" + "\n".join(tools)
    return [{"id": f"bench-{i}", "system": system, "question": f"Request {i}: find the price of record {i % 7}.",
             "answer": f'<tool_call>{{"name": "lookup_{i % 7}"}}</tool_call>'} for i in range(count)]


def messages_of(args: argparse.Namespace, example: dict) -> list[dict]:
    if not args.prompt_tokens:
        return ToyEcho().process_prompt(ToyEcho().start(example), "echo")
    return chat_messages(example["system"], example["question"])


def trl_reward(toy: bool):
    """What Cohort's `char_f1` reward gives the same completion: toy scores the first word (an empty
    completion is a format failure, reward 0); toolcall scores the whole text (empty: 0)."""

    def char_f1_reward(completions, answer, **_) -> list[float]:
        out = []
        for completion, gold in zip(completions, answer, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            words = text.split()
            prediction = (words[0] if toy else text) if words else None
            out.append(0.0 if prediction is None else char_f1(prediction, gold))
        return out

    return char_f1_reward


# --- timing helpers -------------------------------------------------------------------------------
def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(obj, name: str, bucket: dict, key: str, device: str, after=None) -> None:
    """Wrap the bound method `obj.name` so each call adds its wall time to bucket[key] (the
    instance attribute shadows the class method; nothing in the trainer code changes)."""
    method = getattr(obj, name)

    def wrapper(*a, **kw):
        sync(device)
        t0 = time.perf_counter()
        result = method(*a, **kw)
        sync(device)
        bucket[key] = bucket.get(key, 0.0) + time.perf_counter() - t0
        bucket[key + " calls"] = bucket.get(key + " calls", 0) + 1
        if after is not None:
            after(result, bucket)
        return result

    setattr(obj, name, wrapper)


class NullReporter:
    def status(self, state, **info):
        pass

    def step(self, event):
        pass

    def should_stop(self):
        return False


# --- the two trainers -----------------------------------------------------------------------------
def make_cohort(args, model_path: Path, examples: list[dict], work: Path):
    from trainer.run.loop import Trainer

    data = None
    if args.prompt_tokens:
        data = work / "train.jsonl"
        data.write_text("".join(json.dumps(e) + "\n" for e in examples))
    longest = args.prompt_tokens + args.max_new_tokens + 256
    config = RunConfig(
        program="toolcall" if args.prompt_tokens else "toy", model=str(model_path),
        train_data=str(data) if data else None,
        device=args.device, dtype=args.dtype, gradient_checkpointing="on" if args.gradient_checkpointing else "off",
        strategy="grpo", estimator="grpo", group_size=args.group_size, rollouts_per_example=args.group_size,
        examples_per_step=args.prompts, steps=args.warmup + args.steps, learning_rate=args.learning_rate,
        lr_scheduler="constant", clip_eps_low=0.2, clip_eps_high=0.2, kl_beta=0.0, loss_aggregation="token",
        micro_batch_size=args.micro_batch_size, max_grad_norm=1.0, lora_r=16, lora_alpha=64, lora_dropout=0.05,
        lora_targets=list(LORA_TARGETS), temperature=args.temperature, top_p=1.0, top_k=0,
        max_new_tokens=args.max_new_tokens, max_context_length=max(longest, 512), rewards=[{"name": "char_f1"}],
        eval_every=0, checkpoint_every=0, seed=0)
    trainer = Trainer(config, work / "cohort-run", NullReporter(), model_cache_dir=work)
    bucket: dict = {}
    timed(trainer.parts.backend, "generate", bucket, "generate", args.device)

    def tokens(stats, b):
        b["tokens"], b["completion_tokens"] = stats["tokens"], stats["completion_tokens"]

    timed(trainer.parts.updater, "update", bucket, "update", args.device, after=tokens)
    # The extra no-grad forward for the old log-probs (TRL skips it when num_iterations = 1, no vLLM).
    timed(trainer.parts.updater, "_frozen_logprobs", bucket, "old_logprobs", args.device)
    import trainer.policy as cohort_policy  # PolicyUpdater calls this module-level name: count every log-prob forward

    timed(cohort_policy, "sequence_logprobs", bucket, "logprob_forward", "count only")  # no extra CUDA syncs
    return trainer, bucket


def make_trl(args, model_path: Path, examples: list[dict], work: Path, callback):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trainer.policy import wrap_with_lora

    if args.trl_head == "compact":
        import trl.trainer.utils as trl_utils  # the compaction switch only; the kernel keeps its own device test

        trl_utils._use_triton = lambda device: True
    dtype = getattr(torch, args.dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(args.device)
    # Cohort's own wrapper and seed: the very adapter init Cohort's Trainer starts from.
    model = wrap_with_lora(base, r=16, alpha=64, dropout=0.05, targets=LORA_TARGETS, seed=0)
    total = args.prompts * args.group_size
    config = GRPOConfig(
        output_dir=str(work / "trl-run"), report_to="none", logging_strategy="no", save_strategy="no",
        disable_tqdm=True, max_steps=args.warmup + args.steps, seed=0, use_cpu=args.device == "cpu",
        # One optimizer step = one generation batch of P x G completions, generated in that step:
        # per-device batch = micro-batch, accumulation = P x G / micro, steps_per_generation then
        # defaults to the accumulation steps, so generation_batch_size = P x G.
        per_device_train_batch_size=args.micro_batch_size, gradient_accumulation_steps=total // args.micro_batch_size,
        num_generations=args.group_size, num_iterations=1, shuffle_dataset=False,
        max_completion_length=args.max_new_tokens, temperature=args.temperature, top_p=1.0, top_k=0,
        use_vllm=False, beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="group",
        learning_rate=args.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0,
        # TRL defaults bf16 and gradient checkpointing to on; set both like Cohort's side.
        bf16=args.dtype == "bfloat16", gradient_checkpointing=args.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False}, dataloader_num_workers=0)
    rows = [{"prompt": messages_of(args, e), "answer": e["answer"]} for e in examples]
    trainer = GRPOTrainer(model=model, reward_funcs=[trl_reward(not args.prompt_tokens)], args=config,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # with tqdm off it would print TRL's end-of-run metrics dict
    bucket: dict = {}
    timed(trainer, "_generate_single_turn", bucket, "generate", args.device)
    timed(trainer, "_get_per_token_logps_and_entropies", bucket, "logprob_forward", "count only")

    def tokens(out, b):
        b["completion_tokens"] = float(out["completion_mask"].sum())
        b["tokens"] = b["completion_tokens"] + float(out["prompt_mask"].sum())

    # Generation + rewards + advantages (+ old log-probs when TRL needs them; not here).
    timed(trainer, "_generate_and_score_completions", bucket, "sampling", args.device, after=tokens)
    return trainer, bucket


class Alternate(TrainerCallback):
    """Times each TRL step, then runs and times one Cohort step before TRL's next one."""

    def __init__(self, args):
        self.args, self.cohort, self.cohort_bucket, self.trl_bucket = args, None, None, None
        self.rows: dict[str, list[dict]] = {"cohort": [], "trl": []}

    def on_step_begin(self, args, state, control, **kw):
        self.trl_bucket.clear()
        sync(self.args.device)
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        sync(self.args.device)
        self.rows["trl"].append({"step": time.perf_counter() - self.t0, **self.trl_bucket})
        self.cohort_bucket.clear()
        sync(self.args.device)
        t0 = time.perf_counter()
        result = self.cohort.train_step(state.global_step)
        sync(self.args.device)
        self.rows["cohort"].append({"step": time.perf_counter() - t0, "sampling": result.metrics["time/sampling_s"],
                                    **self.cohort_bucket})


# --- report ---------------------------------------------------------------------------------------
def med(rows: list[dict], key: str) -> float:
    values = [r.get(key, 0.0) for r in rows]
    return statistics.median(values) if values else float("nan")


def report(args, rows: dict[str, list[dict]], setup: str, params: str) -> None:
    c, t = rows["cohort"][args.warmup:], rows["trl"][args.warmup:]
    for r in t:
        r["update"] = r["step"] - r.get("sampling", 0.0)  # TRL: everything after generate-and-score
    total = args.prompts * args.group_size
    print(setup)
    print(params)
    print(f"batch: {args.prompts} prompts x G={args.group_size} = {total} completions, <= {args.max_new_tokens} new "
          f"tokens, temperature {args.temperature}, micro-batch {args.micro_batch_size} "
          f"({total // args.micro_batch_size} accumulation steps, 1 optimizer step), {args.warmup} warm-up + "
          f"{args.steps} timed steps per side, alternating")
    print(f"{'median per step':34s} {'Cohort':>10s} {'TRL':>10s}")
    lines = [("step (s)", "step", "step"), ("  sampling+reward (s)", "sampling", "sampling"),
             ("    generate (s)", "generate", "generate"), ("    generate calls", "generate calls", "generate calls"),
             ("  update (s)", "update", "update"),
             ("    old log-prob pass (s)", "old_logprobs", None),
             ("    log-prob forward calls", "logprob_forward calls", "logprob_forward calls"),
             ("completion tokens / step", "completion_tokens", "completion_tokens"),
             ("prompt+completion tokens / step", "tokens", "tokens")]
    for label, ck, tk in lines:
        trl = f"{med(t, tk):10.3f}" if tk else f"{'skipped':>10s}"
        print(f"{label:34s} {med(c, ck):10.3f} {trl}")
    for label, key in (("completion tok/s (step)", "completion_tokens"), ("prompt+completion tok/s (step)", "tokens")):
        print(f"{label:34s} {med(c, key) / med(c, 'step'):10.1f} {med(t, key) / med(t, 'step'):10.1f}")
    print("per-step times (s): Cohort " + " ".join(f"{r['step']:.3f}" for r in c)
          + " | TRL " + " ".join(f"{r['step']:.3f}" for r in t))
    ratio = med(c, "step") / med(t, "step")
    old = med(c, "old_logprobs")
    print(f"old log-prob pass: {old:.3f} s = {100 * old / med(c, 'step'):.1f}% of Cohort's step, "
          f"{100 * old / max(med(c, 'update'), 1e-9):.1f}% of its update; Cohort's step without it: "
          f"{med(c, 'step') - old:.3f} s ({(med(c, 'step') - old) / med(t, 'step'):.2f}x TRL)")
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(f"ratio Cohort / TRL step time = {ratio:.3f}x  ->  {verdict} (target <= {TARGET_RATIO}x)")


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model_path = build_model(args)
    work = Path(tempfile.mkdtemp(prefix="cohort-trl-bench-"))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    examples = make_examples(args, tokenizer, args.prompts * (args.warmup + args.steps))
    prompt_len = len(encode_prompt(tokenizer, messages_of(args, examples[0])))

    callback = Alternate(args)
    cohort, callback.cohort_bucket = make_cohort(args, model_path, examples, work)
    trl_trainer, callback.trl_bucket = make_trl(args, model_path, examples, work, callback)
    callback.cohort = cohort
    n_params = sum(p.numel() for p in cohort.parts.model.parameters())
    n_lora = sum(p.numel() for p in cohort.parts.model.parameters() if p.requires_grad)
    n_lora_trl = sum(p.numel() for p in trl_trainer.model.parameters() if p.requires_grad)
    ready = time.perf_counter()
    try:
        trl_trainer.train()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    done = time.perf_counter()

    import transformers
    import trl

    setup = (f"model {args.model or args.shape or 'tiny llama'} at {model_path}: {n_params / 1e6:.2f}M params, LoRA "
             f"{n_lora / 1e6:.3f}M (TRL {n_lora_trl / 1e6:.3f}M), {args.dtype} on {args.device}, gradient "
             f"checkpointing {'on' if args.gradient_checkpointing else 'off'}, "
             f"torch threads {torch.get_num_threads()}, TRL LM head {args.trl_head}")
    params = (f"prompt {prompt_len} tokens ({'toolcall' if args.prompt_tokens else 'toy'} program, chat template), "
              f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}; "
              f"setup {ready - started:.1f} s, alternating steps {done - ready:.1f} s; optimizer steps taken: "
              f"Cohort {cohort.parts.updater.optimizer_steps}, TRL {trl_trainer.state.global_step}")
    report(args, callback.rows, setup, params)


if __name__ == "__main__":
    main()
