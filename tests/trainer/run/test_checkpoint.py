import pytest
import torch

from trainer.data import ExampleStream, read_jsonl
from trainer.run.checkpoint import (
    MARKER,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)


def save(root, step):
    return save_checkpoint(root, step, policy_state={"w": torch.tensor([float(step)])},
                           trainer_state={"step": step, "cursor": step * 4}, config={"steps": 10})


def test_newest_complete_checkpoint_wins_and_unfinished_ones_are_ignored(tmp_path):
    save(tmp_path, 2)
    save(tmp_path, 4)
    crashed = tmp_path / "step-000006"  # a crash mid-write leaves no marker
    crashed.mkdir()
    (crashed / "policy.pt").write_bytes(b"partial")
    (tmp_path / ".step-000008.tmp-x").mkdir()
    assert latest_checkpoint(tmp_path).name == "step-000004"
    policy, trainer = load_checkpoint(latest_checkpoint(tmp_path))
    assert policy["w"].item() == 4.0 and trainer == {"step": 4, "cursor": 16}


def test_checkpoint_restores_rng_states(tmp_path):
    torch.manual_seed(1)
    path = save(tmp_path, 1)
    expected = torch.rand(3)
    torch.manual_seed(99)
    load_checkpoint(path)
    assert torch.equal(torch.rand(3), expected)


def test_prune_keeps_the_newest(tmp_path):
    for step in (1, 2, 3, 4):
        save(tmp_path, step)
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000003", "step-000004"]
    assert all((p / MARKER).exists() for p in tmp_path.glob("step-*"))


def test_read_jsonl_names_the_bad_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"id": "a"}\n\n{"id": \n')
    with pytest.raises(ValueError, match="line 3: not valid JSON"):
        read_jsonl(path)


def test_example_stream_resumes_from_its_cursor():
    import doctest

    import trainer.data

    assert doctest.testmod(trainer.data).failed == 0
    stream = ExampleStream([{"id": i} for i in range(3)], seed=5)
    seen = [e["id"] for e in stream.next_batch(6)]
    assert sorted(seen[:3]) == [0, 1, 2] and sorted(seen[3:]) == [0, 1, 2]  # each epoch is a permutation
