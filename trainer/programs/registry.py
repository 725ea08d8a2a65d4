"""The registry of LM programs: name -> class, with what the web app mirrors into its database."""

from __future__ import annotations

from typing import Any

PROGRAMS: dict[str, type] = {}


def register_program(cls: type) -> type:
    """Class decorator: makes a program available by its `name`."""
    for attribute in ("name", "title", "description", "agents"):
        if not getattr(cls, attribute, None):
            raise TypeError(f"program {cls.__name__} must define {attribute!r}")
    if cls.name in PROGRAMS and PROGRAMS[cls.name] is not cls:
        raise ValueError(f"two programs are named {cls.name!r}")
    PROGRAMS[cls.name] = cls
    return cls


def get_program(name: str, **options: Any):
    """An instance of program `name`; ValueError naming the known programs for an unknown one."""
    try:
        cls = PROGRAMS[name]
    except KeyError:
        raise ValueError(f"unknown program {name!r}; known programs: {', '.join(sorted(PROGRAMS))}") from None
    accepted = getattr(cls, "options", ())
    return cls(**{k: v for k, v in options.items() if k in accepted})


def program_info(name: str) -> dict[str, Any]:
    cls = PROGRAMS[name] if name in PROGRAMS else get_program(name).__class__
    return {
        "name": cls.name,
        "title": cls.title,
        "description": cls.description,
        "agents": list(cls.agents),
        "dataset_kind": getattr(cls, "dataset_kind", None),
        "example_fields": list(getattr(cls, "example_fields", ())),
        "default_rewards": [dict(r) for r in getattr(cls, "default_rewards", ())],
    }


def list_programs() -> list[dict[str, Any]]:
    return [program_info(name) for name in sorted(PROGRAMS)]
