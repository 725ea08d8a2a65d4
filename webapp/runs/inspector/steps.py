"""Read side of the step and trajectory inspectors: what a step did, and one example's rollouts
aligned module call by module call, with the MHGPO fork trees of the question.

Every function here runs a fixed number of queries whatever the number of rollouts, calls and groups
(the tests assert it at two sizes): rows are fetched per step or per example in one query each and
joined in Python.
"""

from __future__ import annotations

import difflib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.db.models import Avg, Count, Max, Min, Q
from django.http import Http404

from webapp.runs.inspector.token_reads import fill_example_calls
from webapp.runs.models import Group, GroupMember, ModuleCall, Rollout, Run, StepMetric

Slot = tuple[str, int]  # (module, relative invocation index): MMGRPO Algorithm 1's group key


def step_attempt(run: Run, step: int, attempt: int | None = None) -> tuple[int, dict]:
    """(attempt, metrics) of a stored step: the given attempt, else the newest that stored it; 404 if none."""
    rows = StepMetric.objects.filter(run=run, step=step)
    if attempt is not None:
        rows = rows.filter(attempt=attempt)
    found = rows.order_by("-attempt").values_list("attempt", "metrics").first()
    if found is None:
        raise Http404(f"Step {step} of this run is not stored.")
    return found


# --- the step page -----------------------------------------------------------------------------


def step_examples(run: Run, attempt: int, step: int, *, offset: int, limit: int) -> tuple[list[dict], int]:
    """Per example of the step: rollouts, failures (and how many of them raised), reward mean/min/max (a
    page of them) and the total."""
    rows = (Rollout.objects.filter(run=run, attempt=attempt, step=step).values("example_id")
            .annotate(rollouts=Count("id"), failures=Count("id", filter=Q(failed=True)),
                      errors=Count("id", filter=~Q(error="")), mean=Avg("total_reward"),
                      low=Min("total_reward"), high=Max("total_reward"))
            .order_by("example_id"))
    page = list(rows[offset:offset + limit])
    total = len(page) + offset if len(page) < limit else rows.count()
    return page, total


def step_module_summary(run: Run, attempt: int, step: int) -> list[dict]:
    """Per (module, kind): groups, mean group variance, zero-variance groups, mean similarity."""
    return list(
        Group.objects.filter(run=run, attempt=attempt, step=step).values("module", "kind")
        .annotate(groups=Count("id"), mean_var=Avg("reward_var"), mean_similarity=Avg("similarity"),
                  zero_var=Count("id", filter=Q(reward_var=0) | Q(reward_var__isnull=True)))
        .order_by("module", "kind"))


def step_groups(run: Run, attempt: int, step: int, *, module: str = "", limit: int) -> tuple[list[Group], int]:
    groups = Group.objects.filter(run=run, attempt=attempt, step=step)
    if module:
        groups = groups.filter(module=module)
    page = list(groups.order_by("index")[:limit])
    return page, (len(page) if len(page) < limit else groups.count())


# --- the trajectory grid -------------------------------------------------------------------------


@dataclass
class Cell:
    """One (rollout, slot) of the grid: the call there, or a missing slot (perhaps padded)."""

    call: ModuleCall | None = None
    padded_from: list[str] = field(default_factory=list)  # slots whose call fills this one (PadGroups fill)
    duplicates: int = 0  # extra copies of this call in its group (SelectKDiverseElements up-sampling)
    groups: list[tuple[int, str]] = field(default_factory=list)  # (group id, kind)
    differs: bool = False
    segments: list[tuple[str, bool]] = field(default_factory=list)  # completion words, True = differs

    @property
    def missing(self) -> bool:
        return self.call is None


def error_parts(error: str) -> tuple[str, str]:
    """(headline, details) of a stored ``Rollout.error`` (``trainer.rollouts.failures.describe_error``): the
    ``"Type: message"`` the inspector shows large, and where it happened with the traceback tail."""
    headline, sep, rest = error.partition("\n  in ")
    return headline.strip(), (f"in {rest}" if sep else "").strip()


@dataclass
class RolloutError:
    """What a rollout's program or reward code raised, as the inspector shows it."""

    index: int
    headline: str
    details: str


@dataclass
class Row:
    rollout: Rollout
    cells: list[Cell]

    @property
    def calls(self) -> int:
        return sum(1 for c in self.cells if c.call is not None)

    @property
    def error_headline(self) -> str:
        return error_parts(self.rollout.error)[0] if self.rollout.error else ""


@dataclass
class Grid:
    attempt: int
    step: int
    example_id: str
    slots: list[Slot]
    distinct: list[int]  # distinct completions per slot
    rows: list[Row]
    reward_names: list[str]
    trees: list[ForkTree]
    errors: list[RolloutError] = field(default_factory=list)  # rollouts whose program or reward raised


def grid_hide(grid: Grid, hide) -> Grid:
    """The grid with every rollout's error passed through `hide` (an anonymous share link's reader sees
    the tracebacks without paths or names)."""
    rollouts = [row.rollout for row in grid.rows] + [b.rollout for t in grid.trees for b in t.branches]
    rollouts += [t.root for t in grid.trees]
    for rollout in rollouts:
        if rollout.error:
            rollout.error = hide(rollout.error)
    grid.errors = [RolloutError(e.index, hide(e.headline), hide(e.details)) for e in grid.errors]
    return grid


def slot_label(slot: Slot) -> str:
    return f"{slot[0]}#{slot[1]}"


def _word_segments(text: str, reference: str) -> list[tuple[str, bool]]:
    """The words of `text`, flagged where they differ from `reference` (difflib on word lists;
    opcodes are (tag, i1, i2, j1, j2) with j indexing `text`'s words)."""
    words, ref = text.split(" "), reference.split(" ")
    segments = []
    for op, _, _, j1, j2 in difflib.SequenceMatcher(a=ref, b=words, autojunk=False).get_opcodes():
        if j2 > j1:
            segments.append((" ".join(words[j1:j2]), op != "equal"))
    return segments


def trajectory_grid(run: Run, step: int, example_id: str, *, attempt: int | None = None) -> Grid:
    """The rollouts of one example at one step as rows, aligned by (module, invocation index) slots.

    Five queries: the step's attempt, the rollouts, their calls (prompts left out: they load on
    demand), the example's compressed texts with its calls' token details (`call.tokens`, one row:
    webapp/runs/inspector/token_reads.py), and the group memberships of those calls with their groups.
    """
    attempt, _ = step_attempt(run, step, attempt)
    rollouts = list(Rollout.objects.filter(run=run, attempt=attempt, step=step, example_id=example_id)
                    .order_by("index"))
    if not rollouts:
        raise Http404(f"Example {example_id!r} has no rollouts at step {step}.")
    calls = list(ModuleCall.objects.filter(rollout__run=run, rollout__attempt=attempt, rollout__step=step,
                                           rollout__example_id=example_id)
                 .defer("prompt", "messages").order_by("rollout_id", "position"))
    fill_example_calls(run, attempt, step, example_id, calls, {r.pk: r.index for r in rollouts})
    memberships = list(GroupMember.objects.filter(call__rollout__run=run, call__rollout__attempt=attempt,
                                                  call__rollout__step=step, call__rollout__example_id=example_id)
                       .select_related("group").only("padded", "duplicated", "call_id", "group__id",
                                                     "group__module", "group__invocation_index", "group__kind")
                       .order_by("group_id", "position"))
    by_rollout: dict[int, list[ModuleCall]] = defaultdict(list)
    for call in calls:
        by_rollout[call.rollout_id].append(call)
    call_by_id = {c.pk: c for c in calls}

    # Slots in call order: by the earliest position any rollout calls them at, then module name.
    first_position: dict[Slot, int] = {}
    for call in calls:
        slot = (call.module, call.invocation_index)
        first_position[slot] = min(first_position.get(slot, call.position), call.position)
    # Padding may name a slot this example's rollouts never reached on their own (never for MMGRPO,
    # whose groups come from the rollouts' own calls; kept for safety).
    for m in memberships:
        slot = (m.group.module, m.group.invocation_index)
        first_position.setdefault(slot, 10**9)
    slots = sorted(first_position, key=lambda s: (first_position[s], s[0], s[1]))
    column = {slot: i for i, slot in enumerate(slots)}

    cells: dict[int, list[Cell]] = {r.pk: [Cell() for _ in slots] for r in rollouts}
    for rollout in rollouts:
        for call in by_rollout.get(rollout.pk, []):
            cells[rollout.pk][column[(call.module, call.invocation_index)]].call = call

    copies: Counter = Counter()
    for m in memberships:
        call = call_by_id.get(m.call_id)
        if call is None:
            continue
        group_slot = (m.group.module, m.group.invocation_index)
        own = (call.module, call.invocation_index)
        # A padded member is another invocation of the same trajectory standing in for this slot.
        target = group_slot if group_slot in column else own
        cell = cells[call.rollout_id][column[target]]
        if m.padded and target != own and slot_label(own) not in cell.padded_from:
            cell.padded_from.append(slot_label(own))
        if m.duplicated:
            copies[(call.rollout_id, column[target])] += 1
        if (m.group.pk, m.group.kind) not in cell.groups:
            cell.groups.append((m.group.pk, m.group.kind))
    for (rollout_id, col), n in copies.items():
        cells[rollout_id][col].duplicates = n

    distinct = []
    for col in range(len(slots)):
        texts = [cells[r.pk][col].call.completion for r in rollouts if cells[r.pk][col].call is not None]
        counts = Counter(texts)
        distinct.append(len(counts))
        modal = counts.most_common(1)[0][0] if counts else ""
        for r in rollouts:
            cell = cells[r.pk][col]
            if cell.call is None:
                continue
            cell.differs = len(counts) > 1 and cell.call.completion != modal
            cell.segments = (_word_segments(cell.call.completion, modal) if cell.differs
                             else [(cell.call.completion, False)])

    names = list(dict.fromkeys(name for r in rollouts for name in (r.reward_components or {})))
    rows = [Row(r, cells[r.pk]) for r in rollouts]
    errors = [RolloutError(r.index, *error_parts(r.error)) for r in rollouts if r.error]
    return Grid(attempt, step, example_id, slots, distinct, rows, names, fork_trees(rollouts, by_rollout, cells, slots),
                errors)


# --- MHGPO fork trees ----------------------------------------------------------------------------


@dataclass
class Branch:
    rollout: Rollout
    calls: list[tuple[ModuleCall, list[tuple[int, str]]]]  # (call, its groups) from the fork point on


@dataclass
class ForkTree:
    """One fork_on run (MHGPO Algorithm 2): the trunk's calls up to the fork agent, run once and
    shared, then G branches from the fork agent on."""

    root: Rollout
    fork_point: str
    prefix: list[tuple[ModuleCall, list[tuple[int, str]]]]
    branches: list[Branch]


def fork_trees(rollouts: list[Rollout], calls: dict[int, list[ModuleCall]], cells: dict[int, list[Cell]],
               slots: list[Slot]) -> list[ForkTree]:
    """The fork trees among these rollouts: a rollout without a parent is a trunk; its children (the
    other forks) share its calls before the first call of the fork agent."""
    if not any(r.parent_id or r.fork_point for r in rollouts):
        return []
    column = {slot: i for i, slot in enumerate(slots)}

    def groups_of(call: ModuleCall) -> list[tuple[int, str]]:
        return cells[call.rollout_id][column[(call.module, call.invocation_index)]].groups

    children: dict[int, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if r.parent_id:
            children[r.parent_id].append(r)
    trees = []
    for root in rollouts:
        if root.parent_id:
            continue
        kids = children.get(root.pk, [])
        fork_point = root.fork_point or (kids[0].fork_point if kids else "")
        own = calls.get(root.pk, [])
        split = next((i for i, c in enumerate(own) if c.module == fork_point), len(own))
        branches = [Branch(r, [(c, groups_of(c)) for c in calls.get(r.pk, [])[split:]]) for r in [root, *kids]]
        trees.append(ForkTree(root, fork_point, [(c, groups_of(c)) for c in own[:split]], branches))
    return trees
