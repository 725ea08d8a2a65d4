"""MHGPO rollout sampling (paper 001, Appendix A, Algorithms 2-5); reward propagation (Eq. 4) is
``trainer.algorithms.propagation``.

A multi-agent program is anything implementing ``AgentProgram``: the paper's ``MAS.next_agent``,
``MAS.process_prompt`` and ``MAS.has_next_agent``, plus ``start`` (the state holding the question),
``step`` (read an agent's completion into a new state, saying whether it parsed) and ``final_output``.
The LM is a ``generate(agent, prompts) -> completions`` callable, so tests use a deterministic fake.

``fork_on(A_i)`` (Algorithm 2) runs one-to-one until the program first reaches agent A_i, samples G
completions there, and continues each fork one-to-one. The strategies build on it:

- Fork-on-First (Algorithm 3): fork at the entry agent; n*G calls per question for an n-agent chain.
- Independent Sampling (Algorithm 4): fork at every agent, keep only each fork agent's G completions
  (n homogeneous groups of G per question).
- Round-Robin (Algorithm 5): fork agent drawn per question from probabilities p; rollouts left alone in
  their group (the calls before the fork) are pooled over the batch and regrouped into groups of G.

All requests of one round go to ``generate`` together, one call per agent, across the forks and the
questions of a batch (the engine is ``trainer.rollouts.engine``). A completion that does not parse ends
its branch there: the trajectory is kept up to and including that call and marked ``failed`` (MMGRPO
3.1; the reward stage then applies ``apply_format_failure``).

A program method that raises fails the trajectory it was running in the same way, with the error in
``Trajectory.error`` (``trainer.rollouts.failures``); only that branch ends, so one bad fork sibling or example
costs its own rollouts. To fail the whole run instead, a program raises ``RunAbort`` (re-exported here).

Group identifiers (MHGPO's m_k,i) are ``"<example>/fork:<agent>/<module>#<invocation>"``: the G calls
of one agent at one invocation index across the forks of a question share a group (homogeneous at the
fork, heterogeneous after it, a singleton before it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from trainer.rollouts.engine import _jobs, _run_jobs
from trainer.rollouts.failures import RunAbort
from trainer.rollouts.program import (
    AgentProgram,
    Generate,
    LinearChain,
    StepResult,
    _entry_agent_or_none,
    entry_agent,
)
from trainer.rollouts.program import numbered as _numbered  # noqa: F401 - the doctests' LM
from trainer.rollouts.trajectory import ModuleCall, Trajectory, unique_calls

# The program interface is re-exported: a program's author imports it from here or from ``program``.
__all__ = [
    "AgentProgram",
    "Generate",
    "LinearChain",
    "RunAbort",
    "StepResult",
    "entry_agent",
    "fork_on",
    "fork_on_first",
    "independent_sampling",
    "regroup_singletons",
    "round_robin",
]


# ---------------------------------------------------------------------------------------------------
# Algorithms 2-5


def fork_on(
    program: AgentProgram,
    example: Any,
    fork_agent: str,
    *,
    group_size: int,
    generate: Generate,
    example_id: str = "0",
    max_calls: int = 64,
) -> list[Trajectory]:
    """fork_on (MHGPO Algorithm 2): one-to-one until ``fork_agent`` is first reached, G completions
    there, one-to-one after. Returns the G trajectories (one when control flow never reaches the
    fork agent; a name outside ``program.agents`` is an error);
    they share the prefix calls, fork 0 is the trunk and forks 1..G-1 name it as ``parent_id``.

    Example (rewriter -> reranker -> answerer, G=2, fork at the reranker: 1 + 2 + 2 calls)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> trajs = fork_on(chain, "q?", "reranker", group_size=2, generate=_numbered, example_id="q")
        >>> [[c.completion for c in t.calls] for t in trajs]
        [['rew0', 'rer0', 'ans0'], ['rew0', 'rer1', 'ans1']]
        >>> trajs[1].calls[0] is trajs[0].calls[0], trajs[1].parent_id, trajs[1].fork_point
        (True, 'q/fork:reranker/t0', 'reranker')
        >>> [c.group_id for c in trajs[1].calls]
        ['q/fork:reranker/rewriter#0', 'q/fork:reranker/reranker#0', 'q/fork:reranker/answerer#0']
    """
    if fork_agent not in program.agents:
        raise ValueError(f"fork agent {fork_agent!r} is not one of the program's agents {list(program.agents)}")
    jobs = _jobs([example], [example_id], [fork_agent], group_size)
    return _run_jobs(program, jobs, generate, max_calls=max_calls)[0]


def fork_on_first(
    program: AgentProgram,
    examples: Sequence[Any],
    *,
    group_size: int,
    generate: Generate,
    example_ids: Sequence[str] | None = None,
    max_calls: int = 64,
) -> list[Trajectory]:
    """Fork-on-First (MHGPO Algorithm 3): ``fork_on`` at each question's entry agent, so the entry
    agent's G outputs form a homogeneous group and every later agent a heterogeneous one; an n-agent
    chain costs n*G calls per question. Returns all trajectories, question by question.

    Example (3 agents, G=4, one question: 4 trajectories, 3 * 4 completions)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> trajs = fork_on_first(chain, ["q?"], group_size=4, generate=_numbered)
        >>> len(trajs), len({c.call_id for t in trajs for c in t.calls})
        (4, 12)
        >>> from trainer.algorithms.propagation import mhgpo_groups
        >>> [(g.group_id, len(g.members), g.kind) for g in mhgpo_groups(trajs)]  # doctest: +NORMALIZE_WHITESPACE
        [('0/fork:rewriter/rewriter#0', 4, 'homogeneous'), ('0/fork:rewriter/reranker#0', 4, 'heterogeneous'),
         ('0/fork:rewriter/answerer#0', 4, 'heterogeneous')]
    """
    agents = [_entry_agent_or_none(program, example) for example in examples]
    jobs = _jobs(examples, example_ids, agents, group_size)
    return [t for trajs in _run_jobs(program, jobs, generate, max_calls=max_calls) for t in trajs]


def independent_sampling(
    program: AgentProgram,
    examples: Sequence[Any],
    *,
    group_size: int,
    generate: Generate,
    example_ids: Sequence[str] | None = None,
    max_calls: int = 64,
) -> list[Trajectory]:
    """Independent Sampling (MHGPO Algorithm 4): ``fork_on`` at every agent A_i of ``program.agents``
    and keep only the rollout pairs of A_i at its fork, i.e. its homogeneous group of G (the other
    calls of that run get ``group_id=None``: they only carry rewards back). Per question: n
    homogeneous groups of G. Returns every trajectory of every run (n*G per question).

    Example (3 agents, G=4: 12 trajectories, three homogeneous groups of 4)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> trajs = independent_sampling(chain, ["q?"], group_size=4, generate=_numbered, example_ids=["q"])
        >>> from trainer.algorithms.propagation import mhgpo_groups
        >>> len(trajs), [(g.group_id, len(g.members), g.kind) for g in mhgpo_groups(trajs)]  # doctest: +NORMALIZE_WHITESPACE
        (12, [('q/fork:rewriter/rewriter#0', 4, 'homogeneous'), ('q/fork:reranker/reranker#0', 4, 'homogeneous'),
              ('q/fork:answerer/answerer#0', 4, 'homogeneous')])
    """
    agents = list(program.agents)
    jobs = _jobs(
        [ex for ex in examples for _ in agents],
        None if example_ids is None else [e for e in example_ids for _ in agents],
        [a for _ in examples for a in agents],
        group_size,
    )
    runs = _run_jobs(program, jobs, generate, max_calls=max_calls)
    out = []
    for job, trajs in zip(jobs, runs, strict=True):
        keep = f"{job.prefix}/{job.fork_agent}#0"  # fork_on forks at the first interaction: index 0
        for call in unique_calls(trajs):
            if call.group_id != keep:
                call.group_id = None
        out.extend(trajs)
    return out


def round_robin(
    program: AgentProgram,
    examples: Sequence[Any],
    *,
    group_size: int,
    probs: Sequence[float],
    generate: Generate,
    rng: np.random.Generator | int | None = None,
    example_ids: Sequence[str] | None = None,
    regroup_by: Literal["module", "module_fork", "all"] = "module",
    max_calls: int = 64,
) -> list[Trajectory]:
    """Round-Robin (MHGPO Algorithm 5): per question draw the fork agent A_i ~ Categorical(p) over
    ``program.agents`` (the paper uses p = (0.7, 0.1, 0.2)), ``fork_on`` it, then regroup the batch's
    singleton rollout pairs into groups of G with ``regroup_singletons``. ``rng`` (Generator or seed;
    None = seed 0) drives both the draws and the shuffle.

    Example (p = (0, 1, 0): every question forks at the reranker, so the 8 rewriter calls are singletons,
    regrouped into 2 groups of 4)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> trajs = round_robin(chain, [f"q{i}" for i in range(8)], group_size=4, probs=[0, 1, 0], generate=_numbered)
        >>> {t.fork_point for t in trajs}
        {'reranker'}
        >>> from trainer.algorithms.propagation import mhgpo_groups
        >>> sorted((g.group_id, len(g.members)) for g in mhgpo_groups(trajs) if g.group_id.startswith("rr/"))
        [('rr/rewriter/0', 4), ('rr/rewriter/1', 4)]
    """
    p = np.asarray(probs, dtype=float)
    agents = list(program.agents)
    if p.shape != (len(agents),) or (p < 0).any() or not math.isclose(float(p.sum()), 1.0, abs_tol=1e-9):
        raise ValueError(
            f"probs must give one non-negative probability per agent {agents} summing to 1, got {list(probs)}"
        )
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(0 if rng is None else rng)
    fork_agents = [agents[i] for i in gen.choice(len(agents), size=len(examples), p=p)]
    jobs = _jobs(examples, example_ids, fork_agents, group_size)
    trajs = [t for run in _run_jobs(program, jobs, generate, max_calls=max_calls) for t in run]
    regroup_singletons(trajs, group_size=group_size, rng=gen, by=regroup_by)
    return trajs


def regroup_singletons(
    trajectories: Sequence[Trajectory],
    *,
    group_size: int,
    rng: np.random.Generator | int | None = None,
    by: Literal["module", "module_fork", "all"] = "module",
) -> None:
    """MHGPO Algorithm 5, group reassignment: rollout pairs whose group identifier occurs once in the
    batch are shuffled and partitioned into floor(|P_single| / G) new groups of G; the remaining
    |P_single| mod G pairs are not in the final set (group_id set to ``None``).

    ``by`` chooses the pool: ``"all"`` is Algorithm 5 to the letter (agents mixed, which parameter
    sharing permits); ``"module"`` (default) keeps one pool per agent, so a group is one agent's
    outputs; ``"module_fork"`` pools per agent and fork agent, as the RR text puts it ("grouped with
    other rollouts at A_j ... whose fork points are also at i"). New ids: ``rr/<pool>/<n>``.

    Example (10 singletons, G=4: two groups of 4, two left out)::

        >>> chain = LinearChain(("rewriter", "answerer"))
        >>> trajs = [t for i in range(10) for t in fork_on(chain, f"q{i}", "answerer", group_size=2,
        ...                                                 generate=_numbered, example_id=f"q{i}")]
        >>> regroup_singletons(trajs, group_size=4, rng=0)
        >>> from collections import Counter
        >>> sorted(Counter(t.calls[0].group_id for t in trajs[::2]).items(), key=str)
        [('rr/rewriter/0', 4), ('rr/rewriter/1', 4), (None, 2)]
    """
    if by not in ("module", "module_fork", "all"):
        raise ValueError(f"by must be 'module', 'module_fork' or 'all', got {by!r}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(0 if rng is None else rng)
    calls = unique_calls(trajectories)
    fork_of: dict[int, str | None] = {}
    for traj in trajectories:
        for call in traj.calls:
            fork_of.setdefault(id(call), traj.fork_point)
    sizes: dict[str, int] = {}
    for call in calls:
        if call.group_id is not None:
            sizes[call.group_id] = sizes.get(call.group_id, 0) + 1
    pools: dict[str, list[ModuleCall]] = {}
    for call in calls:
        if call.group_id is not None and sizes[call.group_id] == 1:
            if by == "all":
                pool = "all"
            elif by == "module":
                pool = call.module
            else:
                pool = f"{call.module}@{fork_of[id(call)]}"
            pools.setdefault(pool, []).append(call)
    for pool, members in pools.items():
        order = gen.permutation(len(members))
        n_groups = len(members) // group_size
        for rank, i in enumerate(order):
            g = rank // group_size
            members[i].group_id = f"rr/{pool}/{g}" if g < n_groups else None
