"""Rollout throughput of a DSPy program: calls batched across concurrent rollouts vs one at a time.

    python benchmarks/dspy_batching.py                  # tiny local model on CPU, 16 rollouts

The program is a real two-predictor DSPy module (query -> a lookup -> answer, the shape of the
example plugin without its corpus). Both ways run it through ``DSPyProgram`` and the hf backend on
the same model with the same sampling settings:

- batched: the 16 rollouts run concurrently, each on its own thread; the sampler gathers their
  pending LM calls and sends one ``generate`` per module and round (Cohort's way);
- one at a time: the same 16 rollouts run one after the other, every LM call its own ``generate``
  of one prompt (what calling a local model from DSPy does without a batching LM).

Prints rollouts per second of each and their ratio (target: at least 5x). Completions are sampled
from the same distribution both ways, so the tokens generated per rollout are the same on average;
the script prints them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dspy  # noqa: E402
import torch  # noqa: E402

from trainer.backends.hf import HFBackend  # noqa: E402
from trainer.dspy import DSPyProgram  # noqa: E402
from trainer.dspy.adapters import MarkerFallbackAdapter  # noqa: E402
from trainer.models import build_tiny_model  # noqa: E402
from trainer.policy import load_policy_model  # noqa: E402
from trainer.rollouts.prompts import FormattedProgram  # noqa: E402
from trainer.rollouts.sampling import fork_on_first  # noqa: E402


class LookupQA(dspy.Module):
    def __init__(self):
        super().__init__()
        self.generate_query = dspy.Predict("question -> query")
        self.generate_answer = dspy.Predict("context, question -> answer")

    def forward(self, question):
        query = self.generate_query(question=question).query
        return self.generate_answer(context=f"Passages about: {query[:80]}", question=question)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=16, help="concurrent rollouts (examples x G)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    model_dir = Path(tempfile.mkdtemp(prefix="cohort-bench-")) / "tiny"
    model, tokenizer = load_policy_model(build_tiny_model(model_dir))
    backend = HFBackend(model, tokenizer)
    program = FormattedProgram(DSPyProgram(LookupQA, name="lookup_qa", adapter=MarkerFallbackAdapter()),
                               tokenizer, "chat")
    examples = [{"question": f"Which river flows through city number {i}?"}
                for i in range(args.rollouts // args.group_size)]

    tokens = [0]

    def generate(agent, prompts):
        samples = backend.generate(list(prompts), 1, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
        tokens[0] += sum(len(s[0].token_ids) for s in samples)
        return [s[0].text for s in samples]

    def batched() -> int:
        return len(fork_on_first(program, examples, group_size=args.group_size, generate=generate))

    def one_at_a_time() -> int:
        done = 0
        for example in examples:
            for _ in range(args.group_size):
                done += len(fork_on_first(program, [example], group_size=1, generate=generate))
        return done

    results = {}
    for name, run in (("batched", batched), ("one at a time", one_at_a_time)):
        run()  # warm-up
        rates, tokens[0] = [], 0
        for _ in range(args.repeats):
            start = time.perf_counter()
            count = run()
            rates.append(count / (time.perf_counter() - start))
        results[name] = statistics.median(rates)
        print(f"{name:>14}: {results[name]:7.2f} rollouts/s  (median of {args.repeats}, {count} rollouts, "
              f"2 LM calls each, {tokens[0] / (count * args.repeats):.1f} new tokens per rollout)")
    print(f"speed-up of batching: {results['batched'] / results['one at a time']:.1f}x (target >= 5x)")


if __name__ == "__main__":
    main()
