"""The search space (webapp/sweeps/space.py): every bad entry names its field and says why."""

import pytest

from trainer.config import RunConfig
from trainer.programs.toy import ToyEcho
from webapp.sweeps.space import Dimension, SpaceError, grid, parse_space, parse_text

BASE = RunConfig(**{**ToyEcho.suggested_config, "strategy": "mmgrpo", "rollouts_per_example": 8})


def test_values_and_ranges_become_typed_dimensions():
    found = parse_space({"learning_rate": {"low": "1e-5", "high": 1e-3, "log": True}, "group_size": ["4", 8],
                         "lora_r": {"low": 4, "high": 32}, "lr_scheduler": ["constant", "cosine"]}, BASE)
    assert found == [Dimension("learning_rate", "float", low=1e-5, high=1e-3, log=True),
                     Dimension("group_size", "values", values=(4, 8)),
                     Dimension("lora_r", "int", low=4, high=32),
                     Dimension("lr_scheduler", "values", values=("constant", "cosine"))]


@pytest.mark.parametrize(("text", "entry"), [
    ("4, 8", {"values": ["4", "8"]}),
    ("1e-5..1e-3 log", {"low": "1e-5", "high": "1e-3", "log": True}),
    ("0.001..0.01", {"low": "0.001", "high": "0.01", "log": False}),
    ("-1..1", {"low": "-1", "high": "1", "log": False}),
])
def test_the_forms_text(text, entry):
    assert parse_text("learning_rate", text) == entry


@pytest.mark.parametrize(("text", "which"), [("0.1,,0.2", "value 2 of 3"), ("0.1, 0.2,", "value 3 of 3"),
                                             (",0.1", "value 1 of 2"), ("0.1, ,0.2", "value 2 of 3")])
def test_an_empty_element_of_a_list_is_refused_not_dropped(text, which):
    with pytest.raises(SpaceError) as refused:
        parse_space({"learning_rate": parse_text("learning_rate", text)}, BASE)
    assert refused.value.errors == {"learning_rate": f"{which} is empty (as in '0.1,,0.2' or a trailing comma): "
                                                     "remove it or write the value"}


@pytest.mark.parametrize(("space", "field", "words"), [
    ({"learning_rate": {"low": 1e-3, "high": 1e-5}}, "learning_rate", "must be below its high"),
    ({"learning_rate": {"low": 1e-3, "high": 1e-3}}, "learning_rate", "must be below its high"),
    ({"model": {"low": 1, "high": 2}}, "model", "not numeric"),
    ({"no_such_setting": [1, 2]}, "no_such_setting", "no setting"),
    ({"seed": [1, 2]}, "seed", "seeds"),
    ({"group_size": ["four"]}, "group_size", "not an integer"),
    ({"group_size": [1]}, "group_size", "group_size"),  # RunConfig's own check, on the base settings
    ({"learning_rate": {"low": 0, "high": 1, "log": True}}, "learning_rate", "positive low"),
    ({"rewards": [1]}, "rewards", "list or mapping"),
    ({"learning_rate": []}, "learning_rate", "at least one value"),
    ({"learning_rate": [1e-4, None]}, "learning_rate", "value 2 of 2 is empty"),
    ({"model": ["a", " "]}, "model", "value 2 of 2 is empty"),
])
def test_each_bad_entry_is_refused_beside_its_field(space, field, words):
    with pytest.raises(SpaceError) as refused:
        parse_space({"lora_r": [8, 16], **space}, BASE)
    assert set(refused.value.errors) == {field}
    assert words in refused.value.errors[field]


def test_an_empty_space_is_refused_as_a_whole():
    with pytest.raises(SpaceError) as refused:
        parse_space({}, BASE)
    assert None in refused.value.errors


def test_a_grid_is_every_combination_with_ranges_spread():
    dimensions = parse_space({"learning_rate": {"low": 1e-4, "high": 1e-2, "log": True}, "group_size": [4, 8],
                              "lora_r": {"low": 4, "high": 5}}, BASE)
    combos = grid(dimensions, 3)
    assert len(combos) == 3 * 2 * 2
    assert sorted({c["learning_rate"] for c in combos}) == [1e-4, 1e-3, 1e-2]
    assert sorted({c["lora_r"] for c in combos}) == [4, 5]  # a small int range: every integer
