"""Every number field's stated bounds (`_meta(..., bounds=...)`, printed by the manual's run settings
reference) proved against the real validation: for each clause, a value just outside is refused with a
`ConfigError` naming the field, and a value at the bound (or just inside a strict one) is accepted.
The checks in trainer/config stay the source of truth; this keeps the metadata honest."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from trainer.config import ConfigError, RunConfig, literal_choices

FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
NUMBER_TYPES = {"int", "float", "int | None", "float | None"}
NUMBER_FIELDS = sorted(name for name, f in FIELDS.items() if str(f.type) in NUMBER_TYPES)
# The values a field's bound needs of the rest to be reachable at all: G and R may differ only with
# MMGRPO (grpo and mhgpo need R = G), so a lone G of 2, or R of 1, is judged there.
CONTEXT: dict[str, dict[str, Any]] = {"group_size": {"strategy": "mmgrpo"},
                                      "rollouts_per_example": {"strategy": "mmgrpo"}}

NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
RANGE = re.compile(rf"^(?P<lo>{NUMBER}) (?P<op_lo><=|<) x (?P<op_hi><=|<) (?P<hi>{NUMBER})$")
SIDE = re.compile(rf"^(?P<op>>=|>|<=|<|=) (?P<rhs>{NUMBER}|[a-z_]+)"
                  r"(?: with (?P<field>[a-z_]+) (?P<choices>'[a-z_]+'(?: or '[a-z_]+')*))?$")


def clauses(name: str) -> list[str]:
    return FIELDS[name].metadata["bounds"].split(", ")


def parse(clause: str) -> list[tuple[str, str, dict[str, Any]]]:
    """A clause as one-sided bounds `(op, rhs, context)`: `0 < x <= 1` is `> 0` and `<= 1`."""
    if match := RANGE.match(clause):
        flip = {"<": ">", "<=": ">="}
        return [(flip[match["op_lo"]], match["lo"], {}), (match["op_hi"], match["hi"], {})]
    if match := SIDE.match(clause):
        context = {}
        if match["field"]:
            choices = re.findall(r"'([a-z_]+)'", match["choices"])
            context = [{match["field"]: c} for c in choices]
            return [(match["op"], match["rhs"], c) for c in context]
        return [(match["op"], match["rhs"], context)]
    raise AssertionError(f"bounds clause {clause!r} is not one the test (and a reader) can check")


def base(name: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The defaults config's overrides under which `name` is read: its conditions' first values."""
    values: dict[str, Any] = dict(CONTEXT.get(name, {}))
    for key, choices in RunConfig.field_conditions().get(name, {}).items():
        if key in FIELDS:
            default = FIELDS[key].default
            current = str(default).lower() if isinstance(default, bool) else default
            if current not in choices:
                values[key] = choices[0] == "true" if choices[0] in ("true", "false") else choices[0]
    values.update(extra)
    return values


def outside_and_inside(name: str, op: str, rhs: Any) -> tuple[list[Any], list[Any]]:
    whole = str(FIELDS[name].type).startswith("int")
    step = 1 if whole else 1e-6
    if not isinstance(rhs, int | float):
        rhs = getattr(RunConfig(), rhs)  # a bound on another field: its default value
    return {
        ">=": ([rhs - step], [rhs]),
        ">": ([rhs], [rhs + step]),
        "<=": ([rhs + step], [rhs]),
        "<": ([rhs], [rhs - step]),
        "=": ([rhs + 1], [rhs]),
    }[op]


CASES = [(name, clause, side) for name in NUMBER_FIELDS for clause in clauses(name)
         if clause not in ("empty", "any number") for side in parse(clause)]


def test_every_number_field_states_bounds():
    missing = [name for name in NUMBER_FIELDS if not FIELDS[name].metadata.get("bounds")]
    assert not missing, f"number fields without bounds metadata: {missing}"
    choice_fields_with_bounds = [f.name for f in FIELDS.values() if literal_choices(f.type) and "bounds" in f.metadata]
    assert not choice_fields_with_bounds, "a choice field's bounds are its choices (derived, not written)"


@pytest.mark.parametrize(("name", "clause", "side"), CASES, ids=[f"{n}: {c} ({s[0]} {s[1]})" for n, c, s in CASES])
def test_stated_bound_is_the_checks_bound(name, clause, side):
    op, rhs, context = side
    rhs_value: Any = rhs if rhs in FIELDS else (int(rhs) if re.fullmatch(r"-?\d+", rhs) else float(rhs))
    outside, inside = outside_and_inside(name, op, rhs_value)
    # A bound relative to another field is checked as a pair; the check may name either field.
    names = {name, rhs} if rhs in FIELDS else {name}
    for value in outside:
        with pytest.raises(ConfigError) as refused:
            RunConfig(**base(name, {**context, name: value}))
        assert refused.value.field in names, f"{name}={value!r} refused for {refused.value.field}: {refused.value}"
    for value in inside:
        config = RunConfig(**base(name, {**context, name: value}))
        assert getattr(config, name) == value


@pytest.mark.parametrize("name", [n for n in NUMBER_FIELDS if "empty" in clauses(n)])
def test_empty_is_accepted_where_stated(name):
    assert getattr(RunConfig(**base(name, {name: None})), name) is None


@pytest.mark.parametrize("name", [n for n in NUMBER_FIELDS if "any number" in clauses(n)])
def test_any_number_is_accepted_where_stated(name):
    for value in (-1.5, 0, 2.5):
        assert getattr(RunConfig(**base(name, {name: value})), name) == value


def test_bounds_are_written_in_the_grammar_the_manual_documents():
    # Every clause of a number field parses (else the test above would not prove it).
    for name in NUMBER_FIELDS:
        for clause in clauses(name):
            if clause not in ("empty", "any number"):
                assert parse(clause), (name, clause)
