"""Teacher mixtures (MMGRPO Section 3.2; Appendix A, Algorithm 2 SampleTeacherRollouts): rollouts of the
same example from several programs that share the student's LM, the student among them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainer.rollouts.trajectory import ModuleCall, Trajectory  # noqa: F401 - ModuleCall: the doctest's

__all__ = ["sample_teacher_rollouts", "teacher_rollout_plan"]


def teacher_rollout_plan(counts: Mapping[str, int], *, student: str) -> list[str]:
    """The teacher of each rollout, from per-teacher rollout counts K (Algorithm 2's rollout
    configuration K: T -> N). The mixture "must include the student itself" (Section 3.2), so the
    student needs at least one rollout.

    Example::

        >>> teacher_rollout_plan({"student": 2, "big-teacher": 1}, student="student")
        ['student', 'student', 'big-teacher']
    """
    for name, n in counts.items():
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"rollout count for teacher {name!r} must be a non-negative int, got {n!r}")
    if counts.get(student, 0) < 1:
        raise ValueError(
            f"the teacher mixture must include the student {student!r} with at least one rollout "
            f"(MMGRPO Section 3.2); add {student!r}: 1 or more to the counts {dict(counts)}"
        )
    return [name for name, n in counts.items() for _ in range(n)]


def sample_teacher_rollouts(
    example: Any,
    counts: Mapping[str, int],
    run: Callable[[str, Any, int], Trajectory],
    *,
    student: str,
) -> list[Trajectory]:
    """SampleTeacherRollouts (MMGRPO Appendix A, Algorithm 2 lines 11-18): ``counts[t]`` rollouts of
    ``example`` from each teacher program t, via ``run(teacher, example, rollout_index)``, each tagged
    with its ``teacher``. Rewards are left to the caller (line 16's mu).

    Example::

        >>> run = lambda t, ex, i: Trajectory(ex, [ModuleCall("m", 0, "q", f"{t}{i}", True)])
        >>> [(t.teacher, t.calls[0].completion) for t in sample_teacher_rollouts("e1", {"s": 1, "T": 2}, run, student="s")]
        [('s', 's0'), ('T', 'T1'), ('T', 'T2')]
    """
    out = []
    for i, teacher in enumerate(teacher_rollout_plan(counts, student=student)):
        traj = run(teacher, example, i)
        traj.teacher = teacher
        out.append(traj)
    return out
