"""What the apps above runs add to the run pages. Alerts and experiments use runs, never the other way
round: each registers here from its AppConfig.ready(), and this registry imports none of them.

- the alert badge: the run page's socket sends the watcher's count with each alert notice
  (webapp/alerts/apps.py registers `alert_unseen_open_count`);
- run page extras: context the run page and the compare page add about their runs
  (webapp/experiments/apps.py: the experiments the runs belong to);
- launch actions: another submit button of the launch form, which launches something else from the
  same validated form (webapp/experiments/apps.py: "Launch experiment");
- the lab's GPUs: the most GPUs one worker may use, so the launch form shows a setting that needs
  several (`sampler_gpus`) only where it applies (webapp/scheduling/apps.py counts them);
- placement: the places besides this server's workers where a run may train (the Slurm partitions of
  webapp/scheduling/slurm), offered at every door and checked by the one launch check.

Registering under a name again replaces the entry, so a ready() that runs twice registers once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LaunchAction:
    """The launch form's button named after this action: `offered(task)` says whether the form shows
    it for that task; `launch(request, form)` gets the valid form and answers with a response, or
    None after adding the form's errors (the form is then shown again, 400)."""

    offered: Callable[[Any], bool]
    launch: Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Placement:
    """Where else a run may train. `offered()`: [(partition, label)] the launch form lists (empty: none
    now). `check(partition, time_limit_min, processes)`: (the time limit the run gets, in minutes;
    errors keyed "partition" or "time_limit", empty when the placement is fine)."""

    offered: Callable[[], list[tuple[str, str]]]
    check: Callable[[str, int | None, int], tuple[int | None, dict[str, list[str]]]]


_badge_counter: list[Callable[[Any], int]] = []  # at most one: whoever counts the topbar's alert badge
_page_extras: dict[str, Callable[[list], dict[str, Any]]] = {}
_launch_actions: dict[str, LaunchAction] = {}
_gpu_counter: list[Callable[[], int]] = []  # at most one: whoever knows the lab's workers
_placement: list[Placement] = []  # at most one: whoever knows the lab's cluster


# --- the alert badge ----------------------------------------------------------------------------
def register_badge_counter(counter: Callable[[Any], int]) -> None:
    """`counter(user)`: the user's unseen open alerts, as the topbar shows them."""
    _badge_counter[:] = [counter]


def badge_count(user) -> int | None:
    """The user's alert badge (None: no app counts one). Synchronous: it may query the database."""
    return _badge_counter[0](user) if _badge_counter else None


# --- run page extras ----------------------------------------------------------------------------
def register_run_page_extras(name: str, extras: Callable[[list], dict[str, Any]]) -> None:
    """`extras(runs)`: context entries the run page (one run) and the compare page (the chosen runs) add."""
    _page_extras[name] = extras


def run_page_extras(runs: Iterable) -> dict[str, Any]:
    """Every registered app's context entries for a page about these runs (the caller could see them)."""
    runs = list(runs)
    context: dict[str, Any] = {}
    for extras in _page_extras.values():
        context.update(extras(runs))
    return context


# --- launch actions -----------------------------------------------------------------------------
def register_launch_action(button: str, action: LaunchAction) -> None:
    """`button`: the name of the launch form's submit button that asks for this action."""
    _launch_actions[button] = action


def launch_action_chosen(posted: Mapping[str, Any]) -> LaunchAction | None:
    """The action whose button submitted the launch form (None: the plain "Launch run")."""
    return next((action for button, action in _launch_actions.items() if posted.get(button)), None)


def launch_actions_offered(task) -> list[str]:
    """The buttons of the actions the launch form offers for `task` (None: no task, none offered)."""
    if task is None:
        return []
    return [button for button, action in _launch_actions.items() if action.offered(task)]


# --- the lab's GPUs -----------------------------------------------------------------------------
def register_gpu_counter(counter: Callable[[], int]) -> None:
    """`counter()`: the most GPUs one of the lab's workers may use (0: CPU workers only)."""
    _gpu_counter[:] = [counter]


def most_gpus_per_worker() -> int | None:
    """The most GPUs one worker may use (None: no app counts them, so nothing is hidden for want of GPUs)."""
    return _gpu_counter[0]() if _gpu_counter else None


# --- placement ----------------------------------------------------------------------------------
def register_placement(placement: Placement) -> None:
    _placement[:] = [placement]


def placements_offered() -> list[tuple[str, str]]:
    """The partitions a run may be placed on besides this server's workers ([]: none)."""
    return _placement[0].offered() if _placement else []


def placement_check(partition: str, time_limit_min: int | None, processes: int) -> tuple[int | None, dict[str, list[str]]]:
    """The checked placement on `partition`: (its time limit, errors by field)."""
    if not _placement:
        return None, {"partition": ["This server offers no Slurm partitions."]}
    return _placement[0].check(partition, time_limit_min, processes)
