"""When `cohort follow` takes a step as complete (no server: the follower's reading alone)."""

from __future__ import annotations

from cohort.follow import Followed
from tests.trainer.importers.writers import verl_dump, verl_log_line


def test_a_tensorboard_step_is_complete_once_a_later_step_is_written(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    followed = Followed(tmp_path, "tensorboard", None)
    for step in range(3):
        writer.add_scalar("train/reward", step / 2, step)
        writer.flush()
        assert followed.read()
        assert followed.complete(everything=False) == list(range(step))  # the newest may still get values
    assert followed.complete(everything=True) == [0, 1, 2]
    writer.close()


def test_a_verl_step_waits_for_its_dump_unless_a_later_dump_exists(tmp_path):
    (tmp_path / "rollouts").mkdir()
    log = tmp_path / "run.jsonl"
    log.write_bytes(verl_log_line(1) + verl_log_line(2))
    followed = Followed(tmp_path, "verl", None)
    followed.read()
    assert followed.complete(everything=False) == [1]  # no dump folder seen yet: complete once a later step is logged
    (tmp_path / "rollouts" / "2.jsonl").write_text(verl_dump(2))
    with log.open("ab") as out:
        out.write(verl_log_line(3))
    followed.read()
    followed.read()  # a dump is taken once it has not changed since the last look
    # the dump folder is known now: step 2 has its dump, step 3 waits for its own
    assert followed.complete(everything=False) == [1, 2] and len(followed.run.steps[2]["rollouts"]) == 6
