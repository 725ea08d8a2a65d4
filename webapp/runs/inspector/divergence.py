"""Where the best and the worst rollout of an example part: the first module call whose completion
differs (or that one of them lacks), the first differing word in it, and, where both calls stored
per-token details (issue 45), the first token they chose differently: how likely each choice was, the
entropy there, and whether it is a fork (a position among the step's most uncertain ones, whose
alternatives were kept; "high-entropy" only at HIGH_ENTROPY_NATS or more, since a quiet step's top
positions can be nearly certain).

Pure functions over plain data (`Trace`), so they are tested without the database;
`grid_divergence` reads the traces off the trajectory inspector's `Grid`.

MHGPO forked rollouts store the calls they share before their fork point under every fork, with
the same completion, so walking both call lists from the start finds the first difference after
the fork point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from webapp.runs.ingest.tokens import CallTokens
from webapp.runs.inspector.token_pieces import HIGH_ENTROPY_NATS, is_sampled, piece_text, token_key

CONTEXT_WORDS = 3  # words shown on each side of the first differing word
WORD_CHARS = 40  # a longer word is cut in the summary


@dataclass(frozen=True)
class CallText:
    """One module call of a rollout, as far as the divergence needs it."""

    module: str
    invocation: int
    completion: str
    tokens: CallTokens | None = field(default=None, compare=False)  # per-token details, where stored

    @property
    def label(self) -> str:
        return f"{self.module}[{self.invocation}]"


@dataclass(frozen=True)
class Trace:
    """A rollout: its index within the step, its total reward, its calls in call order (position)."""

    index: int
    reward: float | None
    calls: Sequence[CallText]


@dataclass(frozen=True)
class TokenChoice:
    """What one side sampled at the first token where best and worst differ."""

    piece: str  # '' past the end of the shorter completion
    prob: float | None  # of the sampled token (the trainer's log-prob, else the sampler's)
    entropy: float | None  # nats, of the distribution it was sampled from
    # The top-k kept there (a fork), else none: (as shown, probability, whether it is the sampled one).
    alternatives: tuple[tuple[str, float, bool], ...] = ()
    hexed: str | None = None  # its bytes, where it is part of a multi-byte character

    @property
    def text(self) -> str:
        return _quote(piece_text(self.piece, self.hexed)) + ("" if self.prob is None else f" (p={self.prob:.2f})")

    @property
    def alternatives_text(self) -> str:
        """The alternatives kept there with their probabilities, the sampled one marked."""
        return ", ".join(f"{_quote(shown)} {prob:.2f}{' (chosen)' if sampled else ''}"
                         for shown, prob, sampled in self.alternatives)


@dataclass(frozen=True)
class Divergence:
    """The best and the worst rollout and where they part.

    `position` is the 0-based place in both call lists of the first differing call (None when
    every call is identical); `best_call` / `worst_call` are the calls there (None on the side
    that has no call at that position). `word_index` is the 0-based index of the first differing
    whitespace-separated word (None when a call is missing); a word past the end of the shorter
    completion is ''.
    """

    best: Trace
    worst: Trace
    position: int | None = None
    best_call: CallText | None = None
    worst_call: CallText | None = None
    word_index: int | None = None
    best_word: str = ""
    worst_word: str = ""
    best_context: str = ""
    worst_context: str = ""
    token_index: int | None = None  # first differing token, where both calls have token details
    best_token: TokenChoice | None = None
    worst_token: TokenChoice | None = None

    @property
    def identical(self) -> bool:
        return self.position is None

    @property
    def missing_side(self) -> str:
        """'best' or 'worst': the side without a call at `position`; '' when both have one."""
        if self.position is None:
            return ""
        return "best" if self.best_call is None else ("worst" if self.worst_call is None else "")

    @property
    def call_number(self) -> int | None:
        return None if self.position is None else self.position + 1

    @property
    def word_number(self) -> int | None:
        return None if self.word_index is None else self.word_index + 1

    @property
    def token_number(self) -> int | None:
        return None if self.token_index is None else self.token_index + 1

    @property
    def at_fork(self) -> bool:
        """The first differing token is a fork: alternatives were kept there on either side."""
        return any(t is not None and t.alternatives for t in (self.best_token, self.worst_token))

    @property
    def token_entropy(self) -> float | None:
        """The entropy where they chose differently (the same context on both sides: the best's, else the worst's)."""
        for choice in (self.best_token, self.worst_token):
            if choice is not None and choice.entropy is not None:
                return choice.entropy
        return None

    @property
    def token_summary(self) -> str:
        """The line about the first differing token; '' without token details on both sides."""
        if self.token_index is None or self.best_token is None or self.worst_token is None:
            return ""
        entropy = "" if self.token_entropy is None else f", entropy {self.token_entropy:.2f} nats there"
        if not self.at_fork:
            kind = "not a stored fork (no alternatives kept there)"
        elif self.token_entropy is not None and self.token_entropy >= HIGH_ENTROPY_NATS:
            kind = f"a high-entropy fork (at least {HIGH_ENTROPY_NATS:.2f} nats; its alternatives are stored)"
        else:
            kind = (f"a fork (its alternatives are stored), though the policy was fairly sure there "
                    f"(under {HIGH_ENTROPY_NATS:.2f} nats)")
        return (f"First token they chose differently: token {self.token_number}, {self.best_token.text} vs "
                f"{self.worst_token.text}{entropy}: {kind}.")

    @property
    def place(self) -> str:
        """The call where they part: 'module[invocation]', or both labels when the calls differ in module."""
        labels = [c.label for c in (self.best_call, self.worst_call) if c is not None]
        return labels[0] if len(set(labels)) == 1 else " vs ".join(labels)

    @property
    def summary(self) -> str:
        """The one line above the grid."""
        head = (f"Best (r={_reward(self.best.reward)}, rollout {self.best.index}) and worst "
                f"(r={_reward(self.worst.reward)}, rollout {self.worst.index})")
        if self.identical:
            return (f"{head} made identical calls: their rewards differ although no completion does "
                    "(a stochastic reward?).")
        where = f"{head} part at {self.place} call {self.call_number}"
        if self.missing_side:
            other = "worst" if self.missing_side == "best" else "best"
            return f"{where}: the {self.missing_side} rollout has no call there, the {other} one does."
        return f"{where}, word {self.word_number}: {_quote(self.best_word)} vs {_quote(self.worst_word)}."


def _reward(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _quote(word: str) -> str:
    if not word:
        return "(end of text)"
    return "'" + (word if len(word) <= WORD_CHARS else word[:WORD_CHARS - 1] + "…") + "'"


def best_and_worst(traces: Sequence[Trace]) -> tuple[Trace, Trace] | None:
    """The highest- and lowest-reward traces (ties: the lowest index); None with fewer than two
    rewarded traces or when every reward is equal. A trace without a reward takes no part."""
    rewarded = sorted((t for t in traces if t.reward is not None), key=lambda t: t.index)
    if len(rewarded) < 2:
        return None
    best = max(rewarded, key=lambda t: t.reward)  # max/min keep the first of equal keys: lowest index
    worst = min(rewarded, key=lambda t: t.reward)
    if best.reward == worst.reward:
        return None
    return best, worst


def first_word_difference(a: str, b: str) -> int | None:
    """Index of the first whitespace-separated word where `a` and `b` differ (a missing word counts);
    None when their words are the same."""
    wa, wb = a.split(), b.split()
    for i in range(max(len(wa), len(wb))):
        if i >= len(wa) or i >= len(wb) or wa[i] != wb[i]:
            return i
    return None


def first_token_difference(a: Sequence, b: Sequence) -> int | None:
    """Index of the first token where `a` and `b` differ (one ending first counts); None when equal.
    Pieces, or `token_key`s where byte tokens are compared by their bytes."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or a[i] != b[i]:
            return i
    return None


def token_choice(tokens: CallTokens, index: int) -> TokenChoice:
    """What `tokens` sampled at `index` ('' with nothing known past its end)."""
    if index >= len(tokens):
        return TokenChoice("", None, None)
    logprob = tokens.logprob(index)
    entropy = tokens.entropy[index] if tokens.entropy is not None else None
    hexed = tokens.byte_pieces.get(index)
    alternatives = tuple((piece_text(a.piece, a.hex), a.prob, is_sampled(a, tokens, index))
                         for a in tokens.topk.get(index, ()))
    return TokenChoice(tokens.pieces[index], None if logprob is None else math.exp(logprob), entropy,
                       alternatives, hexed)


def _token_parting(best: CallText, worst: CallText) -> dict:
    """The Divergence fields of the first differing token, where both calls have token details."""
    if best.tokens is None or worst.tokens is None:
        return {}
    index = first_token_difference([token_key(best.tokens, i) for i in range(len(best.tokens))],
                                   [token_key(worst.tokens, i) for i in range(len(worst.tokens))])
    if index is None:
        return {}
    return {"token_index": index, "best_token": token_choice(best.tokens, index),
            "worst_token": token_choice(worst.tokens, index)}


def word_context(text: str, index: int, width: int = CONTEXT_WORDS) -> str:
    """`width` words either side of word `index`, the word itself in brackets ('[…]' past the end)."""
    words = text.split()
    before = words[max(0, index - width):index]
    word = words[index] if index < len(words) else ""
    after = words[index + 1:index + 1 + width]
    parts = (["…"] if index - width > 0 else []) + before + [f"[{word}]" if word else "[…]"] + after
    if index + 1 + width < len(words):
        parts.append("…")
    return " ".join(parts)


def find_divergence(traces: Sequence[Trace]) -> Divergence | None:
    """Best and worst rollout (by reward) and the first call and word where they part; None when
    there is no best and worst (see `best_and_worst`)."""
    pair = best_and_worst(traces)
    if pair is None:
        return None
    best, worst = pair
    for position in range(max(len(best.calls), len(worst.calls))):
        b = best.calls[position] if position < len(best.calls) else None
        w = worst.calls[position] if position < len(worst.calls) else None
        if b is None or w is None:
            return Divergence(best, worst, position, b, w)
        same_slot = (b.module, b.invocation) == (w.module, w.invocation)
        if same_slot and b.completion == w.completion:
            continue
        # A different module at the same position differs even with equal text: mark its first word.
        k = first_word_difference(b.completion, w.completion)
        k = 0 if k is None else k
        bw, ww = b.completion.split(), w.completion.split()
        return Divergence(best, worst, position, b, w, k, bw[k] if k < len(bw) else "", ww[k] if k < len(ww) else "",
                          word_context(b.completion, k), word_context(w.completion, k), **_token_parting(b, w))
    return Divergence(best, worst)


def grid_divergence(grid) -> Divergence | None:
    """`find_divergence` over the rows of a trajectory `Grid` (webapp.runs.inspector.steps)."""
    traces = []
    for row in grid.rows:
        calls = sorted((c.call for c in row.cells if c.call is not None), key=lambda call: call.position)
        traces.append(Trace(row.rollout.index, row.rollout.total_reward,
                            [CallText(c.module, c.invocation_index, c.completion, getattr(c, "tokens", None))
                             for c in calls]))
    return find_divergence(traces)
