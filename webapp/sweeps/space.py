"""A sweep's search space: which RunConfig fields vary, over which values or ranges.

Stored as JSON (Sweep.space), one entry per field:

    {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": true},   # a float range, log-uniform
     "group_size": {"values": [4, 8]},                           # a list of values
     "lora_r": {"low": 4, "high": 32, "log": true}}               # an int range

The launch form and `launch_run --sweep` write a field's entry as text: `4, 8` (values) or
`1e-5..1e-3 log` (a range, linear without `log`). Every error names its field, so the form shows it
beside that field; a value is checked by RunConfig itself, on the sweep's base settings.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from typing import Any

from trainer.config import RunConfig, literal_choices
from trainer.run.events import INT32_MAX

# What a sweep may not vary: the seed has its own setting (seeds per configuration); the task fills these.
NOT_SWEPT = {"seed", "program", "train_data", "dev_data", "corpus_data"}
MAX_VALUES = 100
RANGE = re.compile(r"^\s*(?P<low>[^.\s][^\s]*?)\s*\.\.\s*(?P<high>[^\s]+)\s*(?P<log>log)?\s*$", re.IGNORECASE)
FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


class SpaceError(ValueError):
    """Bad search space entries: `errors` is field -> message (None: the space as a whole)."""

    def __init__(self, errors: dict[str | None, str]):
        super().__init__("; ".join(f"{k}: {v}" if k else v for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class Dimension:
    """One swept field: a list of `values`, or a numeric range [low, high] (`log`: log-uniform)."""

    name: str
    kind: str  # "values", "int" or "float"
    values: tuple = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False

    def as_json(self) -> dict[str, Any]:
        if self.kind == "values":
            return {"values": list(self.values)}
        return {"low": self.low, "high": self.high, "log": self.log}

    def grid(self, points: int) -> list:
        """The values a grid tries: the listed ones, or `points` spread over the range (every integer
        of a small int range)."""
        if self.kind == "values":
            return list(self.values)
        if self.kind == "int" and self.high - self.low + 1 <= points:
            return list(range(int(self.low), int(self.high) + 1))
        if self.log:
            spread = [math.exp(math.log(self.low) + i * (math.log(self.high) - math.log(self.low)) / (points - 1))
                      for i in range(points)]
        else:
            spread = [self.low + i * (self.high - self.low) / (points - 1) for i in range(points)]
        if self.kind == "int":
            return sorted({int(round(v)) for v in spread})
        return [float(f"{v:.6g}") for v in spread]

    def describe(self) -> str:
        if self.kind == "values":
            return ", ".join(str(v) for v in self.values)
        return f"{self.low:g}..{self.high:g}{' log' if self.log else ''}"


def field_kind(name: str) -> str:
    """'int', 'float', 'bool', 'choice' or 'str' (a list or mapping field cannot be swept: 'other')."""
    annotation = str(FIELDS[name].type)
    if literal_choices(FIELDS[name].type):
        return "choice"
    return {"int": "int", "float": "float", "bool": "bool", "str": "str", "int | None": "int",
            "float | None": "float", "str | None": "str"}.get(annotation, "other")




def _number(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"{str(value)[:40]!r} is not {what}") from None
    return number


def _typed(name: str, value: Any) -> Any:
    """`value` as the field's type (a form's text or a JSON number); ValueError with the reason."""
    kind = field_kind(name)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"{value!r} is not an integer")
        number = _number(value, "an integer") if isinstance(value, str) else value
        if isinstance(number, float) and not (math.isfinite(number) and number.is_integer()):
            raise ValueError(f"{str(value)[:40]!r} is not an integer")
        if abs(number) > INT32_MAX:
            raise ValueError(f"{name} is at most {INT32_MAX:,}")
        return int(number)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"{value!r} is not a number")
        number = _number(value, "a number")
        if not math.isfinite(number):
            raise ValueError(f"{value!r} is not a finite number")
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "on", "off", "1", "0"):
            return value.strip().lower() in ("true", "on", "1")
        raise ValueError(f"{value!r} is not true or false")
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not text")
    if "\x00" in value:
        raise ValueError("text holds a NUL character (\\u0000), which no setting accepts")
    choices = literal_choices(FIELDS[name].type)
    if choices and value.strip() not in choices:
        raise ValueError(f"{value!r} is not one of {', '.join(map(str, choices))}")
    return value.strip()


def parse_text(name: str, text: str) -> dict[str, Any]:
    """A field's entry as the form writes it: `a, b, c` or `low..high [log]`."""
    match = RANGE.match(text)
    if match and ".." in text:
        entry: dict[str, Any] = {"low": match["low"], "high": match["high"], "log": bool(match["log"])}
        return entry
    # Every element kept, the empty ones too: `0.1,,0.2` is refused by `dimension`, never read as two values.
    return {"values": [part.strip() for part in text.split(",")]}


def dimension(name: str, entry: Any) -> Dimension:
    """One entry checked against RunConfig's field `name` (ValueError with the message to show)."""
    if name not in FIELDS:
        raise ValueError(f"RunConfig has no setting {name!r}")
    if name in NOT_SWEPT:
        raise ValueError("the seed is swept by 'seeds' (runs per configuration)" if name == "seed"
                         else f"{name} comes from the task and cannot be swept")
    kind = field_kind(name)
    if kind == "other":
        raise ValueError(f"{name} is a list or mapping setting; a sweep varies numbers, choices and text")
    if isinstance(entry, list):
        entry = {"values": entry}
    if not isinstance(entry, dict):
        raise ValueError('write a list of values, or a range {"low": ..., "high": ..., "log": false}')
    if "values" in entry:
        if set(entry) - {"values"}:
            raise ValueError("give either values or a range (low, high), not both")
        values = entry["values"]
        if not isinstance(values, list) or not values:
            raise ValueError("give at least one value")
        if len(values) > MAX_VALUES:
            raise ValueError(f"at most {MAX_VALUES} values")
        empty = [i for i, v in enumerate(values, 1) if v is None or (isinstance(v, str) and not v.strip())]
        if empty:
            raise ValueError(f"value {empty[0]} of {len(values)} is empty (as in '0.1,,0.2' or a trailing comma): "
                             "remove it or write the value")
        typed = tuple(dict.fromkeys(_typed(name, v) for v in values))
        return Dimension(name, "values", values=typed)
    unknown = set(entry) - {"low", "high", "log"}
    if unknown or not {"low", "high"} <= set(entry):
        raise ValueError('a range is {"low": ..., "high": ..., "log": true|false}')
    if kind not in ("int", "float"):
        raise ValueError(f"{name} is not numeric: a range needs a number setting; list the values instead")
    low, high = _typed(name, entry["low"]), _typed(name, entry["high"])
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise ValueError("'log' must be true or false")
    if low >= high:
        raise ValueError(f"the range's low ({low:g}) must be below its high ({high:g})")
    if log and low <= 0:
        raise ValueError(f"a log range needs a positive low (got {low:g})")
    return Dimension(name, kind, low=low, high=high, log=log)


def parse_space(space: Any, base: RunConfig) -> list[Dimension]:
    """Every entry of `space` checked: the field exists, the values have its type, a range is numeric
    with low < high, and RunConfig accepts each value (and each range's ends) on the base settings.
    SpaceError with one message per bad field."""
    if not isinstance(space, dict) or not space:
        raise SpaceError({None: "Choose at least one setting to sweep: give it several values or a range."})
    errors: dict[str | None, str] = {}
    dimensions = []
    for name, entry in space.items():
        try:
            found = dimension(str(name), entry)
            for value in (found.values if found.kind == "values" else (found.low, found.high)):
                config_with(base, {name: int(value) if found.kind == "int" else value})
        except ValueError as exc:
            errors[str(name)] = str(exc)
            continue
        dimensions.append(found)
    if errors:
        raise SpaceError(errors)
    return dimensions


def config_with(base: RunConfig, params: dict[str, Any]) -> RunConfig:
    """The base settings with `params` (RunConfig validates them: ConfigError names the field)."""
    return RunConfig.from_dict({**base.to_dict(), **params})


def grid(dimensions: list[Dimension], points: int) -> list[dict[str, Any]]:
    """Every combination a grid sweep tries, in a fixed order."""
    names = [d.name for d in dimensions]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(d.grid(points) for d in dimensions))]


def space_json(dimensions: list[Dimension]) -> dict[str, Any]:
    return {d.name: d.as_json() for d in dimensions}
