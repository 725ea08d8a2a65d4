"""The run settings reference (docs/reference/settings.md): every `RunConfig` field, by form group, from
the dataclass itself: its type, default, bounds (`_meta(bounds=...)`, or a choice field's choices),
the condition under which the trainer reads it (`RunConfig.field_conditions()`), its help text and the
paper presets that set it. Anchors: `group-<key>` per group, `setting-<field>` per field."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trainer.config import GROUP_TITLES, PRESETS, PROGRAM_OPTIMIZES_PROMPTS, RunConfig, literal_choices

# What a condition on the program (not on another field) means, in words.
PROGRAM_CONDITIONS = {PROGRAM_OPTIMIZES_PROMPTS: "the program is a DSPy program (its prompts can be optimized)"}


def value_text(value: Any) -> str:
    """A value as a TOML or JSON config writes it (`None`: the field left empty)."""
    if value is None:
        return "empty"
    return json.dumps(value)


def type_text(f: dataclasses.Field) -> str:
    return str(f.type)


def default_text(f: dataclasses.Field) -> str:
    return value_text(RunConfig().to_dict()[f.name])


def bounds_text(f: dataclasses.Field) -> str:
    """The stated bounds, a choice field's choices, or what any value of its type is."""
    choices = literal_choices(f.type)
    if choices:
        return "one of " + ", ".join(json.dumps(c) for c in choices)
    if "bounds" in f.metadata:
        return f.metadata["bounds"]
    if str(f.type) == "bool":
        return "true or false"
    return "any"


def condition_text(f: dataclasses.Field) -> str:
    """`always`, or each other field's values under which this one is read, joined by `and`."""
    when = RunConfig.field_conditions().get(f.name)
    if not when:
        return "always"
    parts = []
    for key, values in when.items():
        if key in PROGRAM_CONDITIONS:
            parts.append(PROGRAM_CONDITIONS[key])
        else:
            parts.append(f"`{key}` is " + " or ".join(f"`{v}`" for v in values))
    return " and ".join(parts)


def condition_link(key: str) -> str:
    return f"[`{key}`](#setting-{key})"


def presets_text(f: dataclasses.Field) -> str:
    setting = [(name, values[f.name]) for name, values in PRESETS.items() if f.name in values]
    if not setting:
        return "none"
    return "; ".join(f"`{name}`: `{value_text(value)}`" for name, value in setting)


def field_entry(f: dataclasses.Field) -> str:
    condition = condition_text(f)
    when = RunConfig.field_conditions().get(f.name, {})
    for key in when:  # link the controlling fields
        if key not in PROGRAM_CONDITIONS:
            condition = condition.replace(f"`{key}` is", f"{condition_link(key)} is", 1)
    help_text = f.metadata["help"].replace("*", r"\*")
    return "\n".join([
        f"### {f.name} {{#setting-{f.name}}}",
        "",
        help_text,
        "",
        f"- **Type:** `{type_text(f)}`",
        f"- **Default:** `{default_text(f)}`",
        f"- **Bounds:** `{bounds_text(f)}`",
        f"- **Read:** {condition}",
        f"- **Presets:** {presets_text(f)}",
        "",
    ])


def render() -> str:
    groups: dict[str, list[dataclasses.Field]] = {key: [] for key in GROUP_TITLES}
    for f in dataclasses.fields(RunConfig):
        groups[f.metadata["group"]].append(f)
    out = ["| group | fields |", "| --- | --- |"]
    for key, fields in groups.items():
        out.append(f"| [{GROUP_TITLES[key]}](#group-{key}) | "
                   + ", ".join(f"[`{f.name}`](#setting-{f.name})" for f in fields) + " |")
    out.append("")
    for key, fields in groups.items():
        out += [f"## {GROUP_TITLES[key]} {{#group-{key}}}", ""]
        out += [field_entry(f) for f in fields]
    return "\n".join(out)
