"""The registry of LM programs: name -> program, with what the web app mirrors into its database.

Built-in programs register themselves with `@register_program`. Other installed packages add
programs under the entry point group ``cohort.programs`` (see `trainer.plugins`): an
`AgentProgram` class, or a factory callable returning a program instance. A factory is called with
no arguments once, to read its metadata (title, description, agents, example_fields,
default_rewards, dataset_kind, ...) from the instance; `get_program` calls it again for each run
with the options its signature accepts (``corpus_path`` for a program that retrieves).

`PROGRAMS` is a read-only mapping name -> class (or factory) of every usable program; plugins are
loaded the first time it is listed or asked for a name that is not a built-in.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from trainer.plugins import BUILTIN_DISTRIBUTION, PluginGroup, Unavailable

__all__ = ["PROGRAMS", "get_program", "list_programs", "program_error", "program_info", "register_program",
           "unavailable_programs"]

# What every program implements (trainer.rollouts.sampling.AgentProgram), checked when a plugin loads.
PROTOCOL_METHODS = ("start", "has_next", "next_agent", "process_prompt", "step", "final_output")

_BUILTINS: dict[str, type] = {}


def register_program(cls: type) -> type:
    """Class decorator: makes a program available by its `name`."""
    for attribute in ("name", "title", "description", "agents"):
        if not getattr(cls, attribute, None):
            raise TypeError(f"program {cls.__name__} must define {attribute!r}")
    if cls.name in _BUILTINS and _BUILTINS[cls.name] is not cls:
        raise ValueError(f"two programs are named {cls.name!r}")
    _BUILTINS[cls.name] = cls
    return cls


def _info(name: str, source: Any, distribution: str) -> dict[str, Any]:
    """The metadata of a program class or instance `source` (what the web app and CLI show)."""
    return {
        "name": name,
        "title": getattr(source, "title", None) or name,
        "description": getattr(source, "description", None) or "",
        "agents": list(source.agents),
        "dataset_kind": getattr(source, "dataset_kind", None),
        "example_fields": list(getattr(source, "example_fields", None) or ()),
        "default_rewards": [dict(r) for r in getattr(source, "default_rewards", None) or ()],
        "needs_corpus": bool(getattr(source, "needs_corpus", False)),
        # a DSPy program (trainer.dspy.DSPyProgram): DSPy's prompt optimizers can run as phase 1
        "optimizes_prompts": bool(getattr(source, "optimizes_prompts", False)),
        "generates_examples": callable(getattr(source, "generate_examples", None)),
        "suggested_config": dict(getattr(source, "suggested_config", None) or {}),
        # model id -> the settings measured to learn with that model (e.g. the real SmolLM2 on a CPU)
        "model_suggestions": {m: dict(v) for m, v in (getattr(source, "model_suggestions", None) or {}).items()},
        "distribution": distribution,
    }


def _check_plugin_info(info: dict[str, Any], source: Any) -> None:
    """TypeError naming what a plugin program lacks (so it is listed unavailable, not used broken)."""
    missing = [m for m in PROTOCOL_METHODS if not callable(getattr(source, m, None))]
    if missing:
        raise TypeError(f"not an AgentProgram: missing {', '.join(missing)}")
    if not all(isinstance(f, str) and f and "," not in f for f in info["example_fields"]):
        raise TypeError(f"example_fields must be field names without commas, got {info['example_fields']!r}")
    if info["dataset_kind"] is not None and not isinstance(info["dataset_kind"], str):
        raise TypeError(f"dataset_kind must be a string or None, got {info['dataset_kind']!r}")
    for reward in info["default_rewards"]:
        if not isinstance(reward.get("name"), str):
            raise TypeError(f"each of default_rewards needs a 'name', got {reward!r}")


class _PluginProgram:
    """A loaded plugin entry: the class or factory, and its metadata."""

    def __init__(self, target: Callable[..., Any], *, is_factory: bool, info: dict[str, Any]):
        self.target, self.is_factory, self.info = target, is_factory, info


def _build(name: str, obj: Any) -> _PluginProgram:
    """Reads a plugin entry's metadata: from the class, or from the one instance a factory returns."""
    if isinstance(obj, type):
        source, is_factory = obj, False
    elif callable(obj):
        source, is_factory = obj(), True
    else:
        raise TypeError(f"the entry point must name an AgentProgram class or a factory, got {type(obj).__name__}")
    agents = getattr(source, "agents", None)
    if not isinstance(agents, list | tuple) or not agents or not all(isinstance(a, str) and a for a in agents):
        raise TypeError(f"agents must be a non-empty tuple of module names, got {agents!r} (set it on the class, "
                        "or on the instance the factory returns)")
    info = _info(name, source, "")
    _check_plugin_info(info, source)
    return _PluginProgram(obj, is_factory=is_factory, info=info)


_PLUGINS = PluginGroup("cohort.programs", "program", builtin_names=lambda: _BUILTINS, build=_build)


def _plugin(name: str) -> tuple[_PluginProgram, str] | None:
    loaded = _PLUGINS.loaded().get(name)
    return (loaded.value, loaded.distribution) if loaded else None


class _Programs(Mapping):
    """Read-only view: built-ins, then the plugins (loaded on first need)."""

    def __getitem__(self, name: str) -> Any:
        if name in _BUILTINS:
            return _BUILTINS[name]
        plugin = _plugin(name) if isinstance(name, str) else None
        if plugin is None:
            raise KeyError(name)
        return plugin[0].target

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*_BUILTINS, *_PLUGINS.loaded()}))

    def __len__(self) -> int:
        return len({*_BUILTINS, *_PLUGINS.loaded()})

    def __repr__(self) -> str:
        return f"PROGRAMS({', '.join(self)})"


PROGRAMS: Mapping[str, Any] = _Programs()


def _unknown(name: str) -> ValueError:
    error = _PLUGINS.error_for(name) if isinstance(name, str) else None
    if error is not None:
        return ValueError(f"program {name!r} is unavailable: {error}")
    return ValueError(f"unknown program {name!r}; known programs: {', '.join(PROGRAMS)}")


def _accepted_options(target: Callable[..., Any], declared: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The options `target` takes: those it declares (`options` attribute), else its signature's."""
    if declared is not None:
        return {k: v for k, v in options.items() if k in declared}
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return dict(options)
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in options.items() if k in names}


def get_program(name: str, **options: Any):
    """An instance of program `name`, given the `options` it accepts.

    ValueError naming the known programs for an unknown name, or carrying the plugin's error for an
    unavailable one (a broken import, a clash)."""
    if isinstance(name, str) and name in _BUILTINS:
        cls = _BUILTINS[name]
        return cls(**_accepted_options(cls, getattr(cls, "options", ()), options))
    plugin = _plugin(name) if isinstance(name, str) else None
    if plugin is None:
        raise _unknown(name)
    entry = plugin[0]
    declared = None if entry.is_factory else getattr(entry.target, "options", None)
    return entry.target(**_accepted_options(entry.target, declared, options))


def program_info(name: str) -> dict[str, Any]:
    """Name, title, description, agents, dataset_kind, example_fields, default_rewards, needs_corpus,
    generates_examples, suggested_config, model_suggestions and distribution (``cohort`` for a built-in)
    of `name`."""
    if isinstance(name, str) and name in _BUILTINS:
        return _info(name, _BUILTINS[name], BUILTIN_DISTRIBUTION)
    plugin = _plugin(name) if isinstance(name, str) else None
    if plugin is None:
        raise _unknown(name)
    entry, distribution = plugin
    return {**entry.info, "default_rewards": [dict(r) for r in entry.info["default_rewards"]],
            "suggested_config": dict(entry.info["suggested_config"]),
            "model_suggestions": {m: dict(v) for m, v in entry.info["model_suggestions"].items()},
            "distribution": distribution}


def list_programs() -> list[dict[str, Any]]:
    """`program_info` of every usable program (built-ins and loaded plugins), by name."""
    return [program_info(name) for name in PROGRAMS]


def unavailable_programs() -> list[Unavailable]:
    """Plugin programs that are not used, each with its distribution and error."""
    return _PLUGINS.unavailable()


def program_error(name: str) -> str | None:
    """Why `name` cannot be used when it is an unavailable plugin program; None otherwise (also for
    a built-in whose name a plugin tried to take: the built-in works)."""
    if name in _BUILTINS:
        return None
    if _plugin(name) is not None:
        return None
    return _PLUGINS.error_for(name)
