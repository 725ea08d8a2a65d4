"""Registry of reward functions by stable name, for configs, the run form and the UI.

``REWARDS[name]`` is the reward class (its constructor is the factory; its ``value_range`` class
attribute is the default range); ``get_reward(name, **params)`` builds one with validated parameters.

Other installed packages add rewards under the entry point group ``cohort.rewards`` (see
`trainer.plugins`): a `Reward` subclass, or a plain callable ``reward(example, output, trajectory)``
whose keyword-only parameters (with defaults) become the reward's parameters. A plain callable is
wrapped in a generated `CallableReward` subclass, so built-ins and plugins answer the same API.
``REWARDS`` is a read-only mapping, loading plugins the first time it is listed or asked for a name
that is not a built-in.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from trainer.plugins import BUILTIN_DISTRIBUTION, PluginGroup, Unavailable
from trainer.rewards.base import CallableReward, Reward

__all__ = ["REWARDS", "get_reward", "list_rewards", "register_builtin_rewards", "register_reward", "reward_defaults",
           "reward_error", "unavailable_rewards"]

# Filled by trainer.rewards.builtins (imported by the package): the registry imports no reward of its
# own, so a reward built from other rewards (ConditionedLength) can look them up here.
_BUILTINS: dict[str, type[Reward]] = {}


def register_builtin_rewards(classes: Iterable[type[Reward]]) -> None:
    """Cohort's own rewards, by their `name` (distribution `cohort`; a plugin cannot take these names)."""
    for cls in classes:
        _BUILTINS[cls.name] = cls


# Attributes of every reward: a plain callable's parameter may not take these names.
_RESERVED = {"name", "value_range", "params"}


def _value_range(value: Any, owner: str) -> tuple[float, float]:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value) or value[0] > value[1]):
        raise TypeError(f"{owner}: value_range must be a pair (low, high) of numbers with low <= high, got {value!r}")
    return float(value[0]), float(value[1])


def _from_callable(name: str, fn: Callable[..., Any]) -> type[Reward]:
    """A `CallableReward` subclass for plain callable `fn`: its keyword-only parameters are the fields."""
    signature = inspect.signature(fn)
    fields = []
    for p in signature.parameters.values():
        if p.kind is not p.KEYWORD_ONLY:
            continue
        if p.default is p.empty:
            raise TypeError(f"keyword parameter {p.name!r} needs a default (parameters are optional in a task)")
        if p.name in _RESERVED or p.name.startswith("_"):
            raise TypeError(f"keyword parameter {p.name!r}: choose another name ({', '.join(sorted(_RESERVED))} "
                            "and names starting with _ are taken)")
        if getattr(type(p.default), "__hash__", None) is None:  # a list or dict: a fresh copy per reward
            default = dataclasses.field(default_factory=lambda value=p.default: copy.deepcopy(value))
        else:
            default = dataclasses.field(default=p.default)
        fields.append((p.name, Any, default))
    try:
        signature.bind(None, None, None)
    except TypeError:
        positional = [p.name for p in signature.parameters.values() if p.kind is not p.KEYWORD_ONLY]
        raise TypeError(f"a reward callable takes (example, output, trajectory); {name} takes "
                        f"({', '.join(positional)})") from None
    namespace = {
        "name": name,
        "value_range": _value_range(getattr(fn, "value_range", (0.0, 1.0)), name),
        "function": staticmethod(fn),
        "__doc__": inspect.getdoc(fn) or f"Reward {name} (a plain callable).",
        "__module__": getattr(fn, "__module__", __name__),
    }
    return dataclasses.make_dataclass(f"CallableReward_{name}", fields, bases=(CallableReward,), frozen=True,
                                      namespace=namespace)


def _build(name: str, obj: Any) -> type[Reward]:
    """The reward class of a plugin entry (TypeError when it does not fit the contract)."""
    if isinstance(obj, type):
        if not issubclass(obj, Reward):
            raise TypeError(f"{obj.__name__} is a class but not a trainer.rewards.base.Reward subclass")
        cls = obj if obj.name == name else type(obj.__name__, (obj,), {"name": name, "__module__": obj.__module__})
        _value_range(cls.value_range, name)
        required = [f.name for f in dataclasses.fields(cls) if f.init and f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        if required:
            raise TypeError(f"parameter(s) {', '.join(required)} need a default (parameters are optional in a task)")
        return cls
    if callable(obj):
        return _from_callable(name, obj)
    raise TypeError(f"the entry point must name a Reward subclass or a callable, got {type(obj).__name__}")


def register_reward(name: str, fn: Callable[..., Any]) -> type[Reward]:
    """Makes plain callable ``fn`` reward ``name`` in this process, for code that trains in-process
    (``cohort.dspy.MMGRPO`` registers the DSPy metric it was given). Registering the same name again
    replaces it; a built-in's name is refused."""
    if name in _BUILTINS and not issubclass(_BUILTINS[name], CallableReward):
        raise ValueError(f"{name!r} is a built-in reward; choose another name")
    cls = _from_callable(name, fn)
    _BUILTINS[name] = cls
    _IN_PROCESS.add(name)
    return cls


_IN_PROCESS: set[str] = set()  # names register_reward added (listed as "in-process", not as built-ins)


_PLUGINS = PluginGroup("cohort.rewards", "reward", builtin_names=lambda: _BUILTINS, build=_build)


def _plugin(name: Any):
    return _PLUGINS.loaded().get(name) if isinstance(name, str) else None


class _Rewards(Mapping):
    """Read-only view: built-ins, then the plugins (loaded on first need)."""

    def __getitem__(self, name: str) -> type[Reward]:
        if isinstance(name, str) and name in _BUILTINS:
            return _BUILTINS[name]
        loaded = _plugin(name)
        if loaded is None:
            raise KeyError(name)
        return loaded.value

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*_BUILTINS, *_PLUGINS.loaded()}))

    def __len__(self) -> int:
        return len({*_BUILTINS, *_PLUGINS.loaded()})

    def __repr__(self) -> str:
        return f"REWARDS({', '.join(self)})"


REWARDS: Mapping[str, type[Reward]] = _Rewards()


def _reward_class(name: str) -> type[Reward]:
    try:
        return REWARDS[name]
    except (KeyError, TypeError):
        error = reward_error(name)
        if error is not None:
            raise ValueError(f"reward {name!r} is unavailable: {error}") from None
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(REWARDS)}") from None


def reward_defaults(name: str) -> dict[str, Any]:
    """The parameters of reward ``name`` and their default values (for forms and the UI).

    Example: ``reward_defaults("exact_match") == {"gold_field": "answer", "prediction_field": None}``.
    """
    fields = [f for f in dataclasses.fields(_reward_class(name)) if f.init]
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory() for f in fields}


def get_reward(name: str, **params: Any) -> Reward:
    """Build reward ``name`` with ``params`` (the rest keep their defaults).

    Raises ``ValueError`` for an unknown name (listing the known ones), an unavailable plugin (with
    its error), an unknown parameter (listing the accepted ones) or an invalid value. Example:
    ``get_reward("length", limit=512).value_range == (0.0, 1.0)``.
    """
    cls = _reward_class(name)
    accepted = reward_defaults(name)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for reward {name!r}; "
            f"accepted: {', '.join(accepted) or '(none)'}"
        )
    return cls(**params)


def list_rewards() -> list[dict[str, Any]]:
    """Every usable reward: name, distribution (``cohort`` for a built-in), value range, parameters
    with their defaults, and the first line of its description."""
    rewards = []
    for name in REWARDS:
        cls = REWARDS[name]
        loaded = _plugin(name) if name not in _BUILTINS else None
        rewards.append({
            "name": name,
            "distribution": loaded.distribution if loaded else "in-process" if name in _IN_PROCESS
            else BUILTIN_DISTRIBUTION,
            "value_range": tuple(cls.value_range),
            "params": reward_defaults(name),
            "description": (inspect.getdoc(cls) or "").split("\n", 1)[0],
        })
    return rewards


def unavailable_rewards() -> list[Unavailable]:
    """Plugin rewards that are not used, each with its distribution and error."""
    return _PLUGINS.unavailable()


def reward_error(name: str) -> str | None:
    """Why `name` cannot be used when it is an unavailable plugin reward; None otherwise."""
    if not isinstance(name, str) or name in _BUILTINS or _plugin(name) is not None:
        return None
    return _PLUGINS.error_for(name)
