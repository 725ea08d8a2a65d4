"""Replaying one call of a stored trajectory (trainer/rollouts/replay.py): MHGPO's fork_on at a call,
with the recorded calls before it kept byte for byte and the later modules run again."""

from __future__ import annotations

import pytest

from trainer.algorithms.scoring import BatchScorer
from trainer.config import RunConfig
from trainer.programs.toy import ToyEcho
from trainer.rewards import get_reward
from trainer.rollouts.program import LinearChain, StepResult, numbered
from trainer.rollouts.replay import MAX_GROUP_SIZE, RecordedCall, ReplayMismatch, replay_call
from trainer.rollouts.sampling import fork_on
from trainer.run.replay import AdapterChoice, choose_adapter, find_example, spread

CHAIN = LinearChain(("rewriter", "reranker", "answerer"))


def stored(example="q?", completions=("kept one", "kept two", "old answer")):
    """A trajectory as the trainer would have stored it: fork_on with a scripted LM."""
    answers = iter(completions)
    traj = fork_on(CHAIN, example, "rewriter", group_size=1, generate=lambda a, ps: [next(answers) for _ in ps])[0]
    return [RecordedCall(c.module, c.prompt, c.completion) for c in traj.calls]


def test_the_calls_before_the_position_are_the_stored_ones_byte_for_byte_in_every_fork():
    recorded = stored(completions=("  spaced\tquery ü ", "rank", "answer"))
    forks = replay_call(CHAIN, "q?", recorded, 2, group_size=3, generate=numbered, example_id="q")
    assert len(forks) == 3
    for fork in forks:
        assert [(c.module, c.prompt, c.completion) for c in fork.calls[:2]] == \
            [(r.module, r.prompt, r.completion) for r in recorded[:2]]
        assert fork.calls[0] is forks[0].calls[0]  # shared, as fork_on shares its prefix
    assert [f.calls[2].completion for f in forks] == ["ans0", "ans1", "ans2"]
    assert [f.final_output for f in forks] == ["ans0", "ans1", "ans2"]


def test_replaying_an_earlier_call_runs_every_later_module_again_one_to_one():
    recorded = stored()
    calls = []

    def generate(agent, prompts):
        calls.append((agent, len(prompts)))
        return numbered(agent, prompts)

    forks = replay_call(CHAIN, "q?", recorded, 1, group_size=4, generate=generate, example_id="q")
    assert calls == [("reranker", 4), ("answerer", 4)]  # G at the fork, then one per fork, batched
    assert [[c.completion for c in f.calls] for f in forks] == [["kept one", f"rer{i}", f"ans{i}"] for i in range(4)]
    # the answerer's prompt holds the fork's own reranker output: the later module really ran again
    assert forks[2].calls[2].prompt == "answerer: q? | kept one | rer2"
    assert {f.fork_point for f in forks} == {"reranker"} and forks[1].parent_id == forks[0].trajectory_id
    assert {f.calls[1].group_id for f in forks} == {"q/replay:reranker/reranker#0"}


def test_a_program_that_goes_elsewhere_is_refused_with_words():
    recorded = stored()
    other = LinearChain(("rewriter", "answerer", "reranker"))
    with pytest.raises(ReplayMismatch, match="asks module 'answerer', the stored trajectory 'reranker'"):
        replay_call(other, "q?", recorded, 2, group_size=2, generate=numbered)
    changed = [recorded[0], RecordedCall("reranker", "reranker: something else", "kept two"), recorded[2]]
    with pytest.raises(ReplayMismatch, match="does not replay deterministically"):
        replay_call(CHAIN, "q?", changed, 2, group_size=2, generate=numbered)
    with pytest.raises(ReplayMismatch, match="finished after 1 calls"):
        replay_call(LinearChain(("rewriter",)), "q?", recorded, 1, group_size=2, generate=numbered)


class Strict(LinearChain):
    """Refuses completions holding BAD; raises on CRASH."""

    def step(self, state, agent, completion):
        if "CRASH" in completion:
            raise RuntimeError("boom")
        if "BAD" in completion:
            return StepResult(state, False, None)
        return super().step(state, agent, completion)


def test_a_stored_completion_that_no_longer_parses_and_a_program_error_in_the_prefix_are_mismatches():
    strict = Strict(("rewriter", "reranker", "answerer"))
    with pytest.raises(ReplayMismatch, match="no longer parses"):
        replay_call(strict, "q?", stored(completions=("BAD", "x", "y")), 1, group_size=2, generate=numbered)
    with pytest.raises(ReplayMismatch, match="RuntimeError: boom"):
        replay_call(strict, "q?", stored(completions=("CRASH", "x", "y")), 1, group_size=2, generate=numbered)


def test_a_fork_that_fails_to_parse_or_raises_ends_alone():
    strict = Strict(("rewriter", "reranker", "answerer"))

    def generate(agent, prompts):
        if agent == "reranker":
            return ["BAD", "CRASH", "fine"][: len(prompts)]
        return numbered(agent, prompts)

    forks = replay_call(strict, "q?", stored(), 1, group_size=3, generate=generate)
    assert [len(f.calls) for f in forks] == [2, 2, 3]
    assert [f.failed for f in forks] == [True, True, False]
    assert forks[0].error is None and "RuntimeError: boom" in forks[1].error


@pytest.mark.parametrize(("position", "group_size", "message"), [
    (3, 2, "outside the stored trajectory's 3 calls"), (-1, 2, "outside"), (0, 0, "between 1 and 16"),
    (0, MAX_GROUP_SIZE + 1, "between 1 and 16")])
def test_positions_and_group_sizes_out_of_bounds_are_errors(position, group_size, message):
    with pytest.raises(ValueError, match=message):
        replay_call(CHAIN, "q?", stored(), position, group_size=group_size, generate=numbered)


def test_the_alternatives_are_scored_as_the_training_loop_scores_a_step():
    """The toy program: the run's rewards (char F1 + exact match) through BatchScorer, as the loop."""
    program = ToyEcho()
    config = RunConfig(**ToyEcho.suggested_config)
    example = {"id": "toy-0", "word": "apple", "answer": "apple"}
    prompt = program.process_prompt(program.start(example), "echo")
    from trainer.rollouts.prompts import raw_text

    recorded = [RecordedCall("echo", raw_text(prompt), "pear")]
    outs = iter(["apple", "appl x", ""])
    forks = replay_call(program, example, recorded, 0, group_size=3, generate=lambda a, ps: [next(outs) for _ in ps],
                        example_id="toy-0")
    fns = {s.name: get_reward(s.name, **s.params) for s in config.rewards}
    scored = BatchScorer(config, fns, program.agents).score(forks, {"toy-0": example})
    assert scored[0].rewards == {"char_f1": 1.0, "exact_match": 1.0} and scored[0].total_reward == 2.0
    assert scored[1].rewards["exact_match"] == 0.0 and 0 < scored[1].rewards["char_f1"] < 1
    assert scored[2].failed and scored[2].total_reward == config.format_failure_reward  # the empty one
    assert spread([t.reward for t in scored])["max"] == 2.0


def test_the_adapter_is_the_one_that_sampled_the_step_else_the_newest_else_the_final(tmp_path):
    from trainer.run import checkpoint

    assert choose_adapter(tmp_path, 0) == AdapterChoice("initial", 0, None, True)
    assert choose_adapter(tmp_path, 2) is None  # nothing kept: the adapter is gone
    for step in (2, 4):
        folder = tmp_path / "checkpoints" / f"step-{step:06d}"
        folder.mkdir(parents=True)
        (folder / "policy.pt").write_bytes(b"x")
        (folder / checkpoint.MARKER).write_text(f"{step}\n")
    (tmp_path / "checkpoints" / "step-000006").mkdir()  # unfinished: no marker
    assert choose_adapter(tmp_path, 2).exact and choose_adapter(tmp_path, 2).step == 2
    newest = choose_adapter(tmp_path, 3)
    assert (newest.step, newest.exact) == (4, False) and "newest kept" in newest.describe()


def test_the_checkpoint_names_are_the_checkpoint_modules(tmp_path):
    """trainer/run/replay.py names the loop's checkpoint folders without importing torch: the same names."""
    import inspect

    from trainer.run import checkpoint, loop, replay

    assert replay.CHECKPOINT_MARKER == checkpoint.MARKER
    assert f'run_dir / "{replay.CHECKPOINTS_DIR}"' in inspect.getsource(loop.Trainer)
    saved = checkpoint.save_checkpoint(tmp_path / replay.CHECKPOINTS_DIR, 3, policy_state={}, trainer_state={}, config={})
    assert choose_adapter(tmp_path, 3) == AdapterChoice("checkpoint", 3, str(saved), True)


def test_an_example_is_found_by_its_id_or_refused_with_words():
    assert find_example([{"id": 1}, {"id": "b"}], "1") == {"id": 1}
    with pytest.raises(ValueError, match="not among the run's training examples"):
        find_example([{"id": "a"}], "zzz")
