"""Read side of per-token details (issue 45): a call's tokens for the inspector, a step's forks.

Details live in the example's `CallText` row beside its texts (webapp/runs/ingest/tokens.py). Like the
texts, they are read in a fixed number of queries whatever the number of calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from webapp.runs.ingest.texts import decode_texts, fill_call_texts
from webapp.runs.ingest.tokens import Alternative, CallTokens, decode_tokens
from webapp.runs.inspector.token_pieces import is_sampled, piece_label
from webapp.runs.models import CallText, ModuleCall, Rollout, Run

CONTEXT_BEFORE, CONTEXT_AFTER = 12, 4  # tokens of context around a fork in the step's forks table
FORKS_SHOWN = 100


def fill_call_tokens(calls: Sequence[ModuleCall]) -> None:
    """Sets `call.tokens` (a `CallTokens`, or None where none were stored) on calls of one run; fills
    their texts first where needed. Three queries at most (two when the texts are filled already)."""
    fill_call_texts(calls)
    for call in calls:
        call.tokens = None
    if not calls:
        return
    places = {pk: (run, attempt, step, example, index) for pk, run, attempt, step, example, index in
              Rollout.objects.filter(pk__in={c.rollout_id for c in calls})
              .values_list("pk", "run_id", "attempt", "step", "example_id", "index")}
    completions: dict[tuple, dict[tuple[int, int], str]] = {}
    for call in calls:
        run, attempt, step, example, index = places[call.rollout_id]
        completions.setdefault((run, attempt, step, example), {})[(index, call.position)] = call.completion or ""
    runs = {key[0] for key in completions}
    rows = (CallText.objects.filter(run_id__in=runs, step__in={k[2] for k in completions},
                                    example_id__in={k[3] for k in completions}, tokens__isnull=False)
            .values_list("run_id", "attempt", "step", "example_id", "tokens"))
    decoded = {}
    for run, attempt, step, example, blob in rows:
        wanted = completions.get((run, attempt, step, example))
        if wanted:
            decoded[(run, attempt, step, example)] = decode_tokens(blob, wanted)
    for call in calls:
        run, attempt, step, example, index = places[call.rollout_id]
        call.tokens = decoded.get((run, attempt, step, example), {}).get((index, call.position))


def fill_example_calls(run: Run, attempt: int, step: int, example_id: str, calls: Sequence[ModuleCall],
                       rollout_index: dict[int, int]) -> None:
    """Texts and token details (`call.tokens`) of the calls of one example at one step, read from its
    one `CallText` row together: one query, where `fill_call_texts` then `fill_call_tokens` take four
    (the trajectory inspector has the rollouts already: `rollout_index` maps their pk to their index).
    A call that carries its own text (stored before texts were compressed) keeps it."""
    for call in calls:
        call.tokens = None
    if not calls:
        return
    row = (CallText.objects.filter(run=run, attempt=attempt, step=step, example_id=example_id)
           .values_list("data", "tokens").first())
    texts = decode_texts(row[0]) if row else {}
    for call in calls:
        if call.__dict__.get("completion", "") is None:
            call.prompt, call.messages, call.completion = texts.get(
                (rollout_index[call.rollout_id], call.position), ("", None, ""))
    if row is None or row[1] is None:
        return
    places = {(rollout_index[c.rollout_id], c.position): c for c in calls}
    for place, tokens in decode_tokens(row[1], {p: c.completion or "" for p, c in places.items()}).items():
        places[place].tokens = tokens


def advantage_shares(tokens: CallTokens, advantage: float | None, *, cap: float | None) -> list[float | None]:
    """Each token's share of its call's advantage in the policy gradient: A * w_t / T, with w_t the
    truncated importance weight min(pi_trainer / pi_sampler, cap) where the run corrects for its
    sampler (`cap` given; MMGRPO Eq. 1 with TIS), else 1, and T the completion's tokens."""
    if advantage is None or not len(tokens):
        return [None] * len(tokens)
    shares = []
    for i in range(len(tokens)):
        weight = 1.0
        if cap is not None and tokens.sampler is not None and tokens.trainer is not None:
            s, t = tokens.sampler[i], tokens.trainer[i]
            if s is not None and t is not None:
                weight = min(math.exp(t - s), cap)
        shares.append(advantage * weight / len(tokens))
    return shares


def call_token_rows(call: ModuleCall, *, cap: float | None = None) -> dict | None:
    """A call's tokens as the inspector draws them: one [piece, entropy, log-prob, mismatch, advantage
    share] per token, the alternatives at its forks ({index: [[piece, prob, the sampled one], ...]}),
    and the indices of its byte tokens (their piece written as ⟨E2 80⟩: `piece_label`)."""
    tokens = getattr(call, "tokens", None)
    if tokens is None:
        return None
    shares = advantage_shares(tokens, call.advantage, cap=cap)
    rows = [[piece_label(piece, tokens.byte_pieces.get(i)), (tokens.entropy or [None] * len(tokens))[i],
             tokens.logprob(i), tokens.mismatch(i), shares[i]]
            for i, piece in enumerate(tokens.pieces)]
    forks = {str(i): [[piece_label(a.piece, a.hex), a.prob, is_sampled(a, tokens, i)] for a in alts]
             for i, alts in tokens.topk.items()}
    byte_tokens = [i for i, row in enumerate(rows) if row[0] != tokens.pieces[i]]
    return {"tokens": rows, "forks": forks, "bytes": byte_tokens}


def importance_cap(run: Run) -> float | None:
    """The cap of the run's importance-sampling weight where it corrects for another engine (vLLM)."""
    config = run.config or {}
    if config.get("backend") == "vllm" and config.get("importance_sampling_correction", True):
        cap = config.get("importance_sampling_cap", 2.0)
        return float(cap) if isinstance(cap, int | float) else None
    return None


Piece = tuple[str, str | None]  # a token's text and, for a byte token, its bytes (hex)


@dataclass
class Fork:
    """One fork of a step (among its most uncertain positions, where the trainer kept alternatives):
    where the policy hesitated, and what else it weighed. Rollouts that share the call (MHGPO's forks
    store the calls before their fork point under each) or sampled the same completion give the same
    context and numbers: one Fork stands for them all, `copies` the rollouts with their rewards."""

    example_id: str
    rollout: int  # index within the step (the first of `copies`)
    reward: float | None
    position: int  # the call's position in its rollout
    module: str
    token: int  # index of the token in the call's completion
    entropy: float
    chosen: str
    chosen_prob: float | None
    alternatives: list[Alternative]
    before: tuple[Piece, ...]
    after: tuple[Piece, ...]
    chosen_hex: str | None = None  # the sampled token's bytes, where it is part of a multi-byte character
    sampled: tuple[bool, ...] = ()  # per alternative: the sampled one (token_pieces.is_sampled)
    copies: list[tuple[int, float | None]] = field(default_factory=list)  # (rollout, reward) of each

    def same_as(self) -> tuple:
        """What makes two forks one row: the example, module, context and every number."""
        return (self.example_id, self.module, self.before, self.chosen, self.chosen_hex, self.after, self.entropy,
                self.chosen_prob, tuple(self.alternatives))


def _pieces(tokens: CallTokens, start: int, stop: int) -> tuple[Piece, ...]:
    return tuple((tokens.pieces[i], tokens.byte_pieces.get(i)) for i in range(max(0, start), min(stop, len(tokens))))


def step_forks(run: Run, attempt: int, step: int, *, limit: int = FORKS_SHOWN) -> list[Fork]:
    """The step's fork positions (where the trainer kept alternatives), highest entropy first, the
    same context with the same numbers once (its `copies`), at most `limit` of them. Two queries: the
    step's texts and details, and its calls' modules with their rollouts' rewards."""
    rows = list(CallText.objects.filter(run=run, attempt=attempt, step=step, tokens__isnull=False)
                .values_list("example_id", "data", "tokens"))
    if not rows:
        return []
    calls = {(example, index, position): (module, reward) for example, index, position, module, reward in
             ModuleCall.objects.filter(rollout__run=run, rollout__attempt=attempt, rollout__step=step)
             .values_list("rollout__example_id", "rollout__index", "position", "module", "rollout__total_reward")}
    forks = []
    for example, data, blob in rows:
        completions = {place: completion for place, (_, _, completion) in decode_texts(data).items()}
        for (index, position), tokens in decode_tokens(blob, completions).items():
            module, reward = calls.get((example, index, position), ("", None))
            for i, alternatives in tokens.topk.items():
                entropy = (tokens.entropy or [None] * len(tokens))[i]
                if entropy is None:
                    continue
                logprob = tokens.logprob(i)
                forks.append(Fork(example, index, reward, position, module, i, entropy, tokens.pieces[i],
                                  None if logprob is None else math.exp(logprob), alternatives,
                                  _pieces(tokens, i - CONTEXT_BEFORE, i), _pieces(tokens, i + 1, i + 1 + CONTEXT_AFTER),
                                  tokens.byte_pieces.get(i), tuple(is_sampled(a, tokens, i) for a in alternatives)))
    forks.sort(key=lambda f: (-f.entropy, f.example_id, f.rollout, f.position, f.token))
    folded: dict[tuple, Fork] = {}
    for fork in forks:
        kept = folded.setdefault(fork.same_as(), fork)  # the first: the lowest rollout index
        kept.copies.append((fork.rollout, fork.reward))
    return list(folded.values())[:limit]
