"""A W&B offline run (`wandb/offline-run-*/run-*.wandb`) as an `ImportedRun`.

What is kept, and where:
- the config (every `config` update, `_wandb` left out) as the run's config; the run's display name;
- every logged number at its step. The step is the row's `_step`, or, for a metric that
  `define_metric(..., step_metric=...)` put on another axis (TRL and transformers put `train/*` on
  `train/global_step`), that axis's value in the row (or its last value, as W&B's `step_sync` does).
  Rows that land on the same step merge, a later value winning, as `wandb.log` merges them;
- the summary (numbers and text) beside the config, under the import's record;
- tables: TRL's completions table (columns prompt and completion, a score column per reward function,
  advantage, and step) becomes each step's rollouts, grouped by prompt; another table is listed as
  left out with the reason;
- the run's end: its exit record's code (0: succeeded, else failed); a file without one (the run was
  killed, or is still being written) ends failed, saying so.
Images, histograms and other media are not numbers: listed as skipped, once per name.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from pathlib import Path
from typing import Any

from trainer.importers.records import ImportedRun, Problems, Skip, TableMapping, grouped_by_prompt
from trainer.importers.wandb_log import wandb_records
from trainer.run import events

BOOKKEEPING = frozenset({"_step", "_runtime", "_timestamp", "_wandb"})
REWARD_METRIC = re.compile(r"(?:^|/)rewards/([^/]+)/mean$")


def wandb_run_files(root: Path) -> list[Path]:
    """The run files under `root`: itself, or each `run-*.wandb` below it (W&B's `offline-run-*` folders)."""
    if root.is_file():
        return [root]
    return sorted(root.rglob("run-*.wandb"))


def read_wandb_run(path: Path, problems: Problems) -> ImportedRun:
    run = ImportedRun(origin="wandb", source=path, key=str(path.resolve()))
    axes: dict[str, str] = {}  # metric -> its step metric
    globs: list[tuple[str, str]] = []
    last_axis: dict[str, int] = {}
    fractional: set[str] = set()  # step axes with values that are not whole numbers (an epoch)
    # the numbers on a step axis, placed once the whole file is read: (metric, axis step, the row's _step, value)
    placed: dict[str, list[tuple[str, int, int, Any]]] = {}
    summary: dict[str, Any] = {}
    media: dict[str, str] = {}
    tables: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    exit_code: int | None = None
    for record in wandb_records(path, problems):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.key = f"{record.run.project}/{record.run.run_id}" if record.run.run_id else run.key
            run.name = record.run.display_name or record.run.run_id
            _config_update(run.config, record.run.config.update)
        elif kind == "config":
            _config_update(run.config, record.config.update)
        elif kind == "metric":
            metric = record.metric
            if metric.step_metric:
                if metric.name:
                    axes[metric.name] = metric.step_metric
                elif metric.glob_name:
                    globs.append((metric.glob_name, metric.step_metric))
        elif kind == "history":
            row = _items(record.history.item)
            step = _row_step(row, record.history.step.num)
            on_axes = set(axes.values()) | {a for _, a in globs}
            for key, value in row.items():
                if key in on_axes and _number(value):  # a step axis itself: at its own value
                    if not _whole(value):
                        fractional.add(key)
                    placed.setdefault(key, []).append((key, int(value), step, value))
                    continue
                axis = axes.get(key) or next((a for g, a in globs if fnmatch.fnmatchcase(key, g) and a != key), None)
                if axis and _number(row.get(axis)):
                    last_axis[axis] = int(row[axis])
                if axis in last_axis and _number(value):
                    placed.setdefault(axis, []).append((key, last_axis[axis], step, value))
                else:
                    _keep(run, key, value, last_axis.get(axis, step) if axis else step, media, tables, problems, path)
        elif kind == "summary":
            for key, value in _items(record.summary.update).items():
                if key not in BOOKKEEPING:
                    summary[key] = value
        elif kind == "exit":
            exit_code = record.exit.exit_code
    _place_on_axes(run, fractional, placed, problems, path)
    run.summary = {k: v for k, v in summary.items() if isinstance(v, int | float | str) and not isinstance(v, bool)}
    run.skipped.extend(Skip(name, reason) for name, reason in media.items())
    for name, logged in tables.items():
        _table_rollouts(run, name, logged, path, problems)
    if exit_code is None:
        run.ended, run.error = "failed", "The W&B run file has no exit record: the run was killed, or is still being written."
    else:
        run.ended = "succeeded" if exit_code == 0 else "failed"
        run.error = "" if exit_code == 0 else f"The W&B run exited with code {exit_code}."
    return run


def _place_on_axes(run: ImportedRun, fractional: set[str], placed: dict[str, list[tuple[str, int, int, Any]]],
                   problems: Problems, path: Path) -> None:
    """Each number logged on a step axis at that axis's step; on an axis that is not whole numbers (an
    epoch: no Cohort step), at W&B's own _step instead, which is known only once the file is read."""
    for axis, entries in placed.items():
        whole = axis not in fractional
        if not whole:
            run.skipped.append(Skip(f"step axis {axis}", "not whole numbers: the metrics on it are at W&B's own _step"))
        for key, at, row_step, value in entries:
            _keep(run, key, value, at if whole else row_step, {}, {}, problems, path)


def _config_update(config: dict[str, Any], items) -> None:
    for key, value in _items(items).items():
        if key != "_wandb":
            config[key] = value.get("value", value) if isinstance(value, dict) and set(value) <= {"value", "desc"} else value


def _items(items) -> dict[str, Any]:
    """A history row, summary or config update as a dict (a nested key as nested dicts)."""
    row: dict[str, Any] = {}
    for item in items:
        keys = list(item.nested_key) or [item.key]
        value = json.loads(item.value_json) if item.value_json else None
        target = row
        for key in keys[:-1]:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):
                break
        else:
            target[keys[-1]] = value
    return row


def _row_step(row: dict[str, Any], num: int) -> int:
    step = row.get("_step", num)
    return int(step) if isinstance(step, int | float) and not isinstance(step, bool) else num


def _keep(run: ImportedRun, key: str, value: Any, step: int, media: dict[str, str],
          tables: dict[str, list[tuple[int, dict[str, Any]]]], problems: Problems, path: Path) -> None:
    if key in BOOKKEEPING:
        return
    if isinstance(value, bool) or isinstance(value, int | float):
        if not events.step_in_bounds(step):
            problems.bad(path, f"step {step}", f"a step must be 0-{events.MAX_STEP:,}")
            return
        value = float(value)
        run.step(step)["metrics"][key] = value if math.isfinite(value) else None
    elif isinstance(value, dict) and value.get("_type") in ("table-file", "incremental-table-file", "partitioned-table"):
        tables.setdefault(key, []).append((step, value))
    elif isinstance(value, dict) and "_type" in value:
        media.setdefault(key, f"a W&B {value['_type']}, not a number")
    elif isinstance(value, dict):  # a nested dict logged as one value: each number under its dotted name
        for inner, item in value.items():
            _keep(run, f"{key}.{inner}", item, step, media, tables, problems, path)
    else:
        media.setdefault(key, f"{type(value).__name__} values, not numbers")


def _table_rollouts(run: ImportedRun, name: str, logged: list[tuple[int, dict[str, Any]]], path: Path,
                    problems: Problems) -> None:
    """A table logged at some steps: TRL's completions table as rollouts, another table listed."""
    files = path.parent / "files"
    total_rows = groups = 0
    steps: set[int] = set()
    # TRL logs each reward function's mean as rewards/<name>/mean (train/rewards/<name>/mean through
    # transformers' W&B callback): those names are the table's reward columns.
    reward_metrics = {match.group(1) for s in run.steps.values() for m in s["metrics"]
                      if (match := REWARD_METRIC.search(m))}
    for step, ref in logged:
        table_path = files / str(ref.get("path", ""))
        if not table_path.is_file():  # a run file without its folder (uploaded alone): the table is not there
            run.skipped.append(Skip(f"table {name!r} at step {step}", f"its file {ref.get('path')} is not beside the "
                                    "run file: import the whole offline-run folder"))
            continue
        try:
            table = json.loads(table_path.read_text(encoding="utf-8"))
            columns, data = list(table["columns"]), list(table["data"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.bad(table_path, f"table {name!r} at step {step}", f"unreadable ({exc})")
            continue
        if "prompt" not in columns or "completion" not in columns:
            run.tables.append(TableMapping(name, len(data), 1, 0, "left out: it has no prompt and completion columns"))
            return
        rewards = [c for c in columns if c in reward_metrics] or [
            c for c in columns if c not in ("step", "prompt", "completion", "advantage")
            and all(isinstance(r[columns.index(c)], int | float) or r[columns.index(c)] is None for r in data)]
        weights = run.config.get("reward_weights")
        weights = weights if isinstance(weights, list) and len(weights) == len(rewards) else [1.0] * len(rewards)
        by_step: dict[int, list[dict[str, Any]]] = {}
        for index, values in enumerate(data):
            row = dict(zip(columns, values, strict=False))
            at = _int(row.get("step"), step)
            scores = {c: _finite(row.get(c)) for c in rewards}
            known = [w * s for w, s in zip(weights, scores.values(), strict=True) if s is not None]
            if not events.step_in_bounds(at):
                problems.bad(table_path, f"row {index + 1}", f"step {at!r} is not 0-{events.MAX_STEP:,}")
                continue
            by_step.setdefault(at, []).append({
                "prompt": _text(row["prompt"]), "completion": _text(row["completion"]), "rewards": scores,
                "reward": sum(known) if known else None, "advantage": _finite(row.get("advantage"))})
        for at, rows in by_step.items():
            rollouts, count = grouped_by_prompt(rows)
            run.step(at)["rollouts"].extend(rollouts)
            total_rows += len(rows)
            groups += count
            steps.add(at)
    run.tables.append(TableMapping(name, total_rows, len(steps), groups,
                                   "rollouts" if steps else "left out: none of its files could be read"))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return _number(value) and float(value).is_integer()


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _text(value: Any) -> Any:
    """A prompt or completion as the API takes it: text, or chat messages (role and text content)."""
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        return [{"role": str(m.get("role", "user")), "content": _content(m.get("content", ""))} for m in value]
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _content(value: Any) -> str:
    if isinstance(value, list):  # multimodal content parts: their text
        return "".join(str(part.get("text", "")) for part in value if isinstance(part, dict))
    return str(value)
