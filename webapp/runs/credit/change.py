"""How much each module's outputs changed between two steps: token F1 against its earlier answers to
the same inputs (issue 57, item 3).

For a later step b and an earlier step a (each its newest attempt): every answer of module m at b to
input (example id, m, invocation index) is scored by its best token F1 against m's answers at a to the
same input (``trainer.algorithms.metrics.token_f1``, SQuAD-normalized token F1, the F1 of MHGPO's
intra-group similarity, Fig. 9); the scores are averaged over m's answers at b, and
``change = 1 - mean F1`` (0: it says what it said before; 1: no word in common). Answers to inputs
that step a did not draw are counted, not scored. A call shared by several MHGPO forks is stored under
each fork's rollout with the same prompt and completion: identical (prompt, completion) answers of one
input count once.

Reads the calls and texts of the two steps only (three queries), never the run's other steps, and of at
most `MAX_EXAMPLES` examples of them: past that, the first examples by id that both steps drew.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Max, Min

from trainer.algorithms.metrics import normalize_answer
from trainer.rewards.text import f1_tokens  # what metrics.token_f1 computes, on tokens normalized once
from webapp.runs.ingest.retention import Retention, rollouts_dropped
from webapp.runs.ingest.texts import texts_by_key
from webapp.runs.models import ModuleCall, Rollout, Run

Input = tuple[str, str, int]  # (example id, module, invocation index)
MAX_EXAMPLES = 64  # examples compared at most: the texts of two whole MHGPO-scale steps are megabytes


@dataclass
class ModuleChange:
    module: str
    f1: float | None  # mean best F1 of its later answers against its earlier ones
    answers: int  # later answers scored
    unmatched: int  # later answers to inputs the earlier step did not draw

    @property
    def change(self) -> float | None:
        return None if self.f1 is None else 1.0 - self.f1

    @property
    def note(self) -> str:
        if self.f1 is None:
            return "None of its inputs at the later step was drawn at the earlier one: nothing to compare."
        extra = f"; {self.unmatched} answer(s) to inputs the earlier step did not draw are left out" if self.unmatched else ""
        return f"1 − mean best token F1 over {self.answers} answer(s){extra}."


@dataclass
class OutputChange:
    from_step: int | None
    to_step: int | None
    modules: dict[str, ModuleChange] = field(default_factory=dict)
    absent: str = ""  # why there is no change to show ("" when there is)
    sampled: str = ""  # how the compared examples were chosen when the step is large ("" when all were)
    note: str = ""  # e.g. retention dropped the steps before from_step


def stored_step_range(run: Run) -> tuple[int | None, int | None]:
    """The earliest and newest steps that hold rollouts (1 query)."""
    found = Rollout.objects.filter(run=run).aggregate(first=Min("step"), last=Max("step"))
    return found["first"], found["last"]


def retention_note(run: Run, first: int | None) -> str:
    """Why the default comparison starts at `first` rather than step 1: retention dropped the steps
    before it ("" otherwise)."""
    retention = Retention.of(run)
    if first is not None and first > 1 and retention.active and not retention.keeps(1, run.current_step):
        return (f"The change is measured from step {first}, the earliest stored one: this run's retention "
                f"{retention.describe()}.")
    return ""


def _examples_compared(run: Run, from_step: int, to_step: int, result: OutputChange) -> list[str] | None:
    """The examples whose answers are compared: every one when the later step drew at most
    `MAX_EXAMPLES`; else the first `MAX_EXAMPLES` (by id) that both steps drew, and the note says so (1
    query). An MHGPO-scale step holds thousands of calls and megabytes of prompts: the page reads a
    bounded sample of them, not the whole step."""
    drawn = (Rollout.objects.filter(run=run, step__in={from_step, to_step})
             .values_list("step", "example_id").distinct())
    by_step: dict[int, set[str]] = {from_step: set(), to_step: set()}
    for step, example in drawn:
        by_step[step].add(example)
    if len(by_step[to_step]) <= MAX_EXAMPLES:
        return None
    both = sorted(by_step[from_step] & by_step[to_step])
    chosen = both[:MAX_EXAMPLES]
    result.sampled = (f"Measured on {len(chosen)} of the {len(both)} examples both steps drew "
                      f"(the first by id), so the page stays fast on a large step.")
    return chosen


def output_change(run: Run, from_step: int, to_step: int) -> OutputChange:
    """The change of every module's outputs from `from_step` to `to_step` (see the module docstring)."""
    result = OutputChange(from_step, to_step)
    examples = _examples_compared(run, from_step, to_step, result)
    rows = list(ModuleCall.objects.filter(rollout__run=run, rollout__step__in={from_step, to_step},
                                          **({} if examples is None else {"rollout__example_id__in": examples}))
                .values_list("rollout__attempt", "rollout__step", "rollout__example_id", "rollout__index",
                             "position", "module", "invocation_index", "prompt", "completion"))
    newest: dict[int, int] = {}
    for attempt, step, *_ in rows:
        newest[step] = max(newest.get(step, 0), attempt)
    rows = [r for r in rows if r[0] == newest[r[1]]]
    for step in (from_step, to_step):
        if step not in newest:
            dropped = rollouts_dropped(run, step)
            result.absent = dropped or f"Step {step} stored no rollouts, so there is nothing to compare."
            return result
    keys = {(a, s, e) for a, s, e, _, _, _, _, _, completion in rows if completion is None}
    texts = texts_by_key(run.pk, keys)
    answers: dict[int, dict[Input, dict[tuple[str, str], None]]] = {from_step: defaultdict(dict), to_step: defaultdict(dict)}
    missing_texts: set[int] = set()
    for attempt, step, example, index, position, module, invocation, prompt, completion in rows:
        if completion is None:
            stored = texts.get((attempt, step, example))
            if stored is None or (index, position) not in stored:
                missing_texts.add(step)
                continue
            prompt, _, completion = stored[(index, position)]
        answers[step][(example, module, invocation)].setdefault((prompt or "", completion), None)
    for step in (from_step, to_step):
        if step in missing_texts and not answers[step]:
            result.absent = f"The texts of step {step} are not stored, so its answers cannot be compared."
            return result
    earlier_tokens: dict[Input, list[list[str]]] = {
        key: [normalize_answer(c).split() for c in dict.fromkeys(c for _, c in found)]
        for key, found in answers[from_step].items()}
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    unmatched: dict[str, int] = defaultdict(int)
    modules: dict[str, None] = {}
    for key, found in answers[to_step].items():
        module = key[1]
        modules.setdefault(module, None)
        earlier = earlier_tokens.get(key)
        if not earlier:
            unmatched[module] += len(found)
            continue
        for _, completion in found:
            tokens = normalize_answer(completion).split()
            sums[module] += max(f1_tokens(tokens, e) for e in earlier)
            counts[module] += 1
    for module in sorted(modules):
        n = counts[module]
        result.modules[module] = ModuleChange(module, sums[module] / n if n else None, n, unmatched[module])
    if missing_texts:
        result.note = f"Some texts of step(s) {', '.join(map(str, sorted(missing_texts)))} are not stored; those answers are left out."
    if result.modules and not any(counts.values()):
        # A task drawing fresh examples every step (a large or generated train set) never repeats an input
        # within a short run: the change is then not zero, it is unknown.
        result.absent = (f"Step {to_step} drew none of the inputs step {from_step} drew (the same example, module "
                         f"and call), so no answer has an earlier one to compare with. Compare two steps that drew "
                         f"the same examples: an example's history lists the steps that drew it.")
    return result
