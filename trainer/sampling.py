"""MHGPO rollout sampling and reward propagation (paper 001, Appendix A, Algorithms 2-5; Eq. 4).

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
questions of a batch (the engine is ``trainer.rollout_engine``). A completion that does not parse ends
its branch there: the trajectory is kept up to and including that call and marked ``failed`` (MMGRPO
3.1; the reward stage then applies ``apply_format_failure``).

A program method that raises fails the trajectory it was running in the same way, with the error in
``Trajectory.error`` (``trainer.failures``); only that branch ends, so one bad fork sibling or example
costs its own rollouts. To fail the whole run instead, a program raises ``RunAbort`` (re-exported here).

Group identifiers (MHGPO's m_k,i) are ``"<example>/fork:<agent>/<module>#<invocation>"``: the G calls
of one agent at one invocation index across the forks of a question share a group (homogeneous at the
fork, heterogeneous after it, a singleton before it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from trainer.failures import RunAbort
from trainer.grouping import GroupMember, ModuleGroup
from trainer.rollout_engine import _jobs, _run_jobs
from trainer.trajectory import ModuleCall, Trajectory, unique_calls

__all__ = [
    "AgentProgram",
    "Generate",
    "LinearChain",
    "RunAbort",
    "StepResult",
    "apply_specific_rewards",
    "entry_agent",
    "fork_on",
    "fork_on_first",
    "independent_sampling",
    "mhgpo_groups",
    "propagate_rewards",
    "regroup_singletons",
    "round_robin",
]

Generate = Callable[[str, list[str]], Sequence[str]]
"""``generate(agent, prompts)`` returns one completion per prompt (a prompt repeated G times at a fork
must get G independent samples)."""


@dataclass(frozen=True)
class StepResult:
    """What ``AgentProgram.step`` returns: the next state, whether the completion parsed, and the
    parser's output (stored as ``ModuleCall.parsed``).

    Example: ``StepResult(state=("q", ("rewritten",)), parsed_ok=True, parsed="rewritten")``.
    """

    state: Any
    parsed_ok: bool
    parsed: Any = None


@runtime_checkable
class AgentProgram(Protocol):
    """The multi-agent system interface of MHGPO's Algorithm 2.

    ``agents`` lists the agent (module) names in pipeline order (the A_1..A_n that IS and RR range
    over). ``step`` must not mutate ``state``: the G forks all continue from the same state.
    ``LinearChain`` below is a complete minimal implementation.

    Example::

        >>> isinstance(LinearChain(("rewriter", "reranker", "answerer")), AgentProgram)
        True
    """

    agents: Sequence[str]

    def start(self, example: Any) -> Any:
        """The initial state, holding the question (Algorithm 2: o <- q)."""
        ...

    def has_next(self, state: Any) -> bool:
        """MAS.has_next_agent(o)."""
        ...

    def next_agent(self, state: Any) -> str:
        """MAS.next_agent(o): the agent that acts next."""
        ...

    def process_prompt(self, state: Any, agent: str) -> Any:
        """MAS.process_prompt(o, A): the prompt q for ``agent``: chat messages (``trainer.prompts``)
        or plain text."""
        ...

    def step(self, state: Any, agent: str, completion: str) -> StepResult:
        """Read ``agent``'s completion o into a new state."""
        ...

    def final_output(self, state: Any) -> Any:
        """The system's final response, for the reward."""
        ...


@dataclass(frozen=True)
class LinearChain:
    """The smallest ``AgentProgram``: each agent of ``agents`` acts once, in order; its prompt holds
    the question and the previous outputs; an empty completion does not parse. A reference for real
    programs (trainer/programs/) and the program of the examples in this module.

    Example::

        >>> chain = LinearChain(("rewriter", "answerer"))
        >>> state = chain.start("Who wrote Hamlet?")
        >>> chain.next_agent(state), chain.process_prompt(state, "rewriter")
        ('rewriter', 'rewriter: Who wrote Hamlet?')
        >>> step = chain.step(state, "rewriter", "Hamlet author")
        >>> step.parsed_ok, chain.process_prompt(step.state, "answerer"), chain.has_next(step.state)
        (True, 'answerer: Who wrote Hamlet? | Hamlet author', True)
    """

    agents: tuple[str, ...]

    def start(self, example: Any) -> tuple[str, tuple[str, ...]]:
        return (str(example), ())

    def has_next(self, state: tuple[str, tuple[str, ...]]) -> bool:
        return len(state[1]) < len(self.agents)

    def next_agent(self, state: tuple[str, tuple[str, ...]]) -> str:
        return self.agents[len(state[1])]

    def process_prompt(self, state: tuple[str, tuple[str, ...]], agent: str) -> str:
        return " | ".join([f"{agent}: {state[0]}", *state[1]])

    def step(self, state: tuple[str, tuple[str, ...]], agent: str, completion: str) -> StepResult:
        text = completion.strip()
        return StepResult((state[0], (*state[1], text)), bool(text), text or None)

    def final_output(self, state: tuple[str, tuple[str, ...]]) -> Any:
        return state[1][-1] if state[1] else None


def _numbered(agent: str, prompts: list[str]) -> list[str]:
    # The docstrings' stand-in LM: completion i of a request is "<first 3 letters of agent><i>".
    return [f"{agent[:3]}{i}" for i in range(len(prompts))]


def entry_agent(program: AgentProgram, example: Any) -> str:
    """The first agent to handle ``example`` (Algorithm 3: A_c0 <- MAS.next_agent(q)).

    Example::

        >>> entry_agent(LinearChain(("rewriter", "reranker", "answerer")), "q?")
        'rewriter'
    """
    return program.next_agent(program.start(example))


def _entry_agent_or_none(program: AgentProgram, example: Any) -> str | None:
    """``entry_agent``, or None when the program raises there: the engine starts the example again
    and records that error on its trajectory. ``RunAbort`` propagates."""
    try:
        return entry_agent(program, example)
    except RunAbort:
        raise
    except Exception:
        return None


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


# ---------------------------------------------------------------------------------------------------
# Rewards: backward propagation (Eq. 4) and agent-specific rewards


def _nanmean(values: list[float]) -> float | None:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return sum(known) / len(known) if known else None


def propagate_rewards(trajectories: Sequence[Trajectory]) -> None:
    """Backward reward propagation (MHGPO Eq. 4): the shared reward of a call is the mean (Aggr) of
    the shared rewards of its direct successors; a call that ends trajectories takes their rewards
    (``Trajectory.reward``, the output reward R^shared_i). Sets ``propagated_reward`` on every call;
    unknown (``None``) rewards are left out of the means, and a call with nothing known gets ``None``.

    The tree comes from ``parent_id``; a call without ids follows the previous call of its trajectory.

    Example (fork at the reranker, G=2: the rewriter call has two direct successors)::

        >>> chain = LinearChain(("rewriter", "reranker", "answerer"))
        >>> t0, t1 = fork_on(chain, "q?", "reranker", group_size=2, generate=_numbered)
        >>> t0.total_reward, t1.total_reward = 1.0, 0.0
        >>> propagate_rewards([t0, t1])
        >>> [c.propagated_reward for c in t0.calls], [c.propagated_reward for c in t1.calls]
        ([0.5, 1.0, 1.0], [0.5, 0.0, 0.0])
    """
    objects: dict[Any, list[ModuleCall]] = {}
    parent: dict[Any, Any] = {}
    ends: dict[Any, list[float]] = {}

    def key(call: ModuleCall) -> Any:
        return call.call_id or id(call)

    for traj in trajectories:
        previous = None
        for call in traj.calls:
            k = key(call)
            same = objects.setdefault(k, [])
            if not any(c is call for c in same):
                same.append(call)
            if k not in parent:
                parent[k] = call.parent_id if call.call_id else (key(previous) if previous is not None else None)
            previous = call
        if traj.calls:
            reward = traj.reward
            ends.setdefault(key(traj.calls[-1]), []).append(math.nan if reward is None else reward)
    children: dict[Any, list[Any]] = {}
    for k, p in parent.items():
        if p is not None and p in objects:
            children.setdefault(p, []).append(k)
    depth: dict[Any, int] = {}
    for k in objects:
        chain = []
        node = k
        while node is not None and node not in depth:
            chain.append(node)
            if len(chain) > len(objects):
                raise ValueError(f"parent_id links form a cycle through call {node!r}")
            up = parent.get(node)
            node = up if up in objects else None
        d = depth[node] if node is not None else -1
        for n in reversed(chain):
            d += 1
            depth[n] = d
    shared: dict[Any, float | None] = {}
    for k in sorted(objects, key=lambda n: -depth[n]):  # successors before predecessors
        values = [shared[c] for c in children.get(k, [])] + ends.get(k, [])
        shared[k] = _nanmean([math.nan if v is None else v for v in values])
        for call in objects[k]:
            call.propagated_reward = shared[k]


def apply_specific_rewards(
    trajectories: Sequence[Trajectory], specific: Mapping[str, Callable[[ModuleCall], float]]
) -> None:
    """Agent-specific rewards (MHGPO, after Eq. 4): ``specific[agent](call)`` becomes the call's
    ``specific_reward`` R^spe_k(q, o), so its final reward is ``R = R^shared + R^spe``. Agents without
    an entry keep their current value (0 by default).

    Example (the paper's answer-length penalty)::

        >>> (t,) = fork_on_first(LinearChain(("answerer",)), ["q?"], group_size=1, generate=lambda a, p: ["w " * 12])
        >>> t.total_reward = 1.0
        >>> propagate_rewards([t])
        >>> apply_specific_rewards([t], {"answerer": lambda c: -1.0 if len(c.completion.split()) > 10 else 0.0})
        >>> t.calls[0].specific_reward, t.calls[0].reward
        (-1.0, 0.0)
    """
    for call in unique_calls(trajectories):
        fn = specific.get(call.module)
        if fn is not None:
            call.specific_reward = float(fn(call))


def mhgpo_groups(trajectories: Sequence[Trajectory]) -> list[ModuleGroup]:
    """The groups named by the calls' MHGPO group identifiers (Eq. 5: "all samples that share the same
    group identifier"), each call once, in first-seen order; calls with ``group_id=None`` are left out.
    Feed them to ``group_reward_arrays(groups, source="call")`` and an advantage function.

    Example (IS keeps one group per fork; the other calls have no group id)::

        >>> trajs = independent_sampling(LinearChain(("a", "b")), ["q"], group_size=2, generate=_numbered)
        >>> [(g.module, [m.call.completion for m in g.members]) for g in mhgpo_groups(trajs)]
        [('a', ['a0', 'a1']), ('b', ['b2', 'b3'])]
    """
    owner: dict[Any, Trajectory] = {}
    for traj in trajectories:
        for call in traj.calls:
            owner.setdefault(call.call_id or id(call), traj)
    groups: dict[str, ModuleGroup] = {}
    for call in unique_calls(trajectories):
        if call.group_id is None:
            continue
        traj = owner[call.call_id or id(call)]
        group = groups.get(call.group_id)
        if group is None:
            group = groups[call.group_id] = ModuleGroup(
                call.group_id, call.module, call.invocation_index, [], traj.example_id
            )
        else:
            if group.module != call.module:
                group.module = "*"
            if group.invocation_index != call.invocation_index:
                group.invocation_index = None
            if group.example_id != traj.example_id:
                group.example_id = None
        group.members.append(GroupMember(call, traj))
    return list(groups.values())

