"""Per-token details on the pages (issue 45): what the trajectory inspector embeds for static/js/tokens.js
(each call's tokens as JSON, the colour control, the token to open at, the tokens where the best and the
worst rollout part), the links that open the inspector at one token, and the step page's forks table
(one row per distinct context; tokens drawn by webapp/runs/inspector/token_pieces.py).

The numbers come from webapp/runs/inspector/token_reads.py; nothing here queries the database except `fork_rows`
(through `step_forks`, two queries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from webapp.runs.inspector.divergence import Divergence
from webapp.runs.inspector.steps import Grid
from webapp.runs.inspector.token_pieces import HIGH_ENTROPY_NATS, piece_html
from webapp.runs.inspector.token_reads import Fork, Piece, call_token_rows, importance_cap, step_forks
from webapp.runs.models import ModuleCall, Run
from webapp.runs.params import BadParam
from webapp.runs.params import int_param as _int_param

# "Colour tokens by": (value of ?colour=, label). "none" keeps the word-diff view.
COLOURINGS = (("none", "none"), ("entropy", "entropy"), ("logprob", "log-prob"),
              ("mismatch", "sampler/trainer mismatch"), ("advantage", "share of the advantage"))
FOCUS_COLOURING = "entropy"  # a link to one token opens the page coloured by this
SIGNIFICANT = 4  # digits of the computed numbers sent (the stored ones are float16 already)


def cell_key(rollout_index: int, position: int) -> str:
    """How the page names a call: its rollout's index in the step and its position in the rollout
    (the `rollout` and `call` of a link to one token)."""
    return f"{rollout_index}-{position}"


def _short(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.{SIGNIFICANT}g}")


def token_rows(call: ModuleCall, *, cap: float | None) -> dict | None:
    """`call_token_rows` with each token's sampler and trainer log-probs appended (the tooltip shows
    both): [piece, entropy, log-prob, |sampler - trainer|, advantage share, sampler, trainer]."""
    rows = call_token_rows(call, cap=cap)
    if rows is None:
        return None
    tokens = call.tokens
    for i, row in enumerate(rows["tokens"]):
        row[3], row[4] = _short(row[3]), _short(row[4])
        row.append(tokens.sampler[i] if tokens.sampler is not None else None)
        row.append(tokens.trainer[i] if tokens.trainer is not None else None)
    return rows


@dataclass
class Focus:
    """The token a link opens the inspector at (`?rollout=&call=&token=`)."""

    rollout: int
    position: int
    token: int

    @property
    def cell(self) -> str:
        return cell_key(self.rollout, self.position)


def focus_param(request) -> Focus | None:
    """The token of `?rollout=<index>&call=<position>&token=<i>`: all three or none (BadParam)."""
    values = [_int_param(request, name) for name in ("rollout", "call", "token")]
    if all(v is None for v in values):
        return None
    if any(v is None for v in values):
        raise BadParam("'rollout', 'call' and 'token' go together: the rollout's index, the call's position "
                       "in it and the token's index in its completion.")
    return Focus(*values)


def token_url(run_id: int, step: int, example_id: str, attempt: int, rollout: int, position: int, token: int,
              *, base: str | None = None) -> str:
    """The inspector opened at one token (coloured by entropy, the token highlighted, its tooltip open)."""
    base = base or reverse("runs:trajectories", args=[run_id, step])
    return base + "?" + urlencode({"example": example_id, "attempt": attempt, "rollout": rollout,
                                   "call": position, "token": token})


def no_details_reason(run: Run) -> str:
    """Why an inspector page has no token to colour: what the run's settings say."""
    setting = (run.config or {}).get("token_details")
    if run.is_external:
        return ("This run logged no per-token details with these rollouts (the SDK's tokens, logprobs "
                "and entropies).")
    if setting == "off":
        return "This run stored no per-token details (token_details = off)."
    if setting is None:
        return "This run stored no per-token details: it ran before Cohort recorded them."
    if setting == "sampled":
        return ("No call of this example stored per-token details (token_details = sampled keeps them for "
                "the highest- and the lowest-reward member of each group only).")
    return "No call of this example stored per-token details."


@dataclass
class InspectorTokens:
    """What the trajectory inspector shows of per-token details."""

    colour: str  # the colouring chosen (one of COLOURINGS)
    payload: dict | None  # the page's "token-data" JSON; None when no call of the grid has details
    reason: str = ""  # why there are none
    parting_urls: dict[str, str] = field(default_factory=dict)  # best / worst: the token where they part
    choices: tuple = COLOURINGS

    @property
    def cells(self) -> set[str]:
        return set(self.payload["cells"]) if self.payload else set()


def _parting_cells(grid: Grid, divergence: Divergence | None) -> dict[str, tuple[int, int]]:
    """{'best' / 'worst': (rollout index, call position)} of the two calls where they part by token."""
    if divergence is None or divergence.token_index is None:
        return {}
    column = {slot: i for i, slot in enumerate(grid.slots)}
    rows = {row.rollout.index: row for row in grid.rows}
    found = {}
    for side, trace, call in (("best", divergence.best, divergence.best_call),
                              ("worst", divergence.worst, divergence.worst_call)):
        col = column.get((call.module, call.invocation))
        cell = rows[trace.index].cells[col] if col is not None and trace.index in rows else None
        if cell is not None and cell.call is not None:
            found[side] = (trace.index, cell.call.position)
    return found


def inspector_tokens(run: Run, grid: Grid, divergence: Divergence | None, *, colour: str | None,
                     focus: Focus | None) -> InspectorTokens:
    """The grid's calls' tokens for the page (their details were read with the grid's texts)."""
    cap = importance_cap(run)
    cells = {}
    for row in grid.rows:
        for cell in row.cells:
            if cell.call is not None and getattr(cell.call, "tokens", None) is not None:
                cells[cell_key(row.rollout.index, cell.call.position)] = token_rows(cell.call, cap=cap)
    known = {value for value, _ in COLOURINGS}
    if not cells:
        return InspectorTokens("none", None, no_details_reason(run))
    # A link to one token opens coloured by entropy unless it names a colouring.
    chosen = colour if colour in known else (FOCUS_COLOURING if focus is not None else "none")
    parting = _parting_cells(grid, divergence)
    payload = {
        "cells": cells,
        "focus": {"cell": focus.cell, "token": focus.token} if focus is not None and focus.cell in cells else None,
        "diverge": {cell_key(*place): divergence.token_index for place in parting.values()},
    }
    base = reverse("runs:trajectories", args=[run.pk, grid.step])
    urls = {side: token_url(run.pk, grid.step, grid.example_id, grid.attempt, *place, divergence.token_index, base=base)
            for side, place in parting.items()}
    return InspectorTokens(chosen, payload, parting_urls=urls)


# --- the step page's forks ---------------------------------------------------------------------------


def pieces_html(pieces: tuple[Piece, ...]) -> SafeString:
    """A context's tokens one after the other, each as `piece_html` draws it."""
    return mark_safe("".join(piece_html(piece, hexed) for piece, hexed in pieces))  # each one escaped


@dataclass
class ForkRow:
    """One row of the step's forks table: one distinct context with its numbers (`fork.copies`: the
    rollouts that share it)."""

    fork: Fork
    url: str  # the inspector at this token (in the first of its rollouts)
    before: SafeString
    chosen: SafeString
    after: SafeString
    alternatives: list[tuple[SafeString, float, bool]]  # (piece, probability, the sampled one)

    @property
    def count(self) -> int:
        return len(self.fork.copies)

    @property
    def high_entropy(self) -> bool:
        return self.fork.entropy >= HIGH_ENTROPY_NATS

    @property
    def copies_title(self) -> str:
        """Which rollouts share this context, with their rewards."""
        listed = ", ".join(f"#{rollout} ({'—' if reward is None else f'{reward:.2f}'})" for rollout, reward in self.fork.copies)
        return f"The same context and numbers in {self.count} rollouts: {listed}"


class ForkRows(list):
    """The step page's forks table: its rows, and what its summary counts."""

    high_entropy_nats = HIGH_ENTROPY_NATS

    @property
    def positions(self) -> int:
        """Fork positions in the rows, every rollout that shares one counted."""
        return sum(row.count for row in self)

    @property
    def high(self) -> int:
        """Rows at or above the high-entropy threshold."""
        return sum(row.high_entropy for row in self)


def fork_rows(run: Run, attempt: int, step: int) -> ForkRows:
    """The step's forks, highest entropy first, one row per distinct context (two queries)."""
    base = reverse("runs:trajectories", args=[run.pk, step])
    return ForkRows(
        ForkRow(f, token_url(run.pk, step, f.example_id, attempt, f.rollout, f.position, f.token, base=base),
                pieces_html(f.before), piece_html(f.chosen, f.chosen_hex), pieces_html(f.after),
                [(piece_html(a.piece, a.hex), a.prob, sampled) for a, sampled in zip(f.alternatives, f.sampled, strict=True)])
        for f in step_forks(run, attempt, step))


def no_forks_note(run: Run) -> str:
    """The line the step page shows instead of its forks table."""
    setting = (run.config or {}).get("token_details")
    if setting == "off":
        return "No forks: this run stored no per-token details (token_details = off)."
    if setting is None or run.is_external:
        return "No forks: this step stored no per-token details with alternatives."
    return "No forks stored for this step: no token details with alternatives were kept."
