"""An imported run fitted to the step-event contract, and the plan `--dry-run` prints.

`fitted` cuts what the logging API would refuse into named skips before anything is sent (a step
with more metrics than a step holds keeps the first by name; a longer text is cut), so a run is
either uploaded whole as the plan says or, for a bad record, not at all. The run's config gains the
import's record: `_import` = source path, format, importer version, and the source's summary.
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

from trainer.importers.records import IMPORTER_VERSION, ImportedRun, Skip
from trainer.run import events


def fitted(run: ImportedRun) -> dict[str, Any]:
    """Cuts `run` to the contract's bounds (recording each cut) and returns its creation fields:
    name, config (with `_import`), notes (the text summaries), total_steps."""
    too_many = 0
    long_names: set[str] = set()
    cut_rewards: set[int] = set()
    for number, step in run.steps.items():
        if any("\x00" in name for name in step["metrics"]):
            step["metrics"] = {_clean(name): value for name, value in step["metrics"].items()}
        metrics = step["metrics"]
        for name in [n for n in metrics if len(n) > events.MAX_METRIC_KEY or not n]:
            long_names.add(name)
            del metrics[name]
        if len(metrics) > events.MAX_METRICS_PER_STEP:
            too_many += 1
            step["metrics"] = dict(sorted(metrics.items())[:events.MAX_METRICS_PER_STEP])
        if len(step["rollouts"]) > events.MAX_ROLLOUTS_PER_STEP:
            run.skipped.append(Skip(f"step {number} rollouts", f"{len(step['rollouts'])} rollouts; a step holds "
                                    f"{events.MAX_ROLLOUTS_PER_STEP:,}: the first kept"))
            step["rollouts"] = step["rollouts"][:events.MAX_ROLLOUTS_PER_STEP]
        for rollout in step["rollouts"]:
            for key in ("prompt", "completion"):
                rollout[key] = _text(rollout[key])
            rewards = {_clean(name)[:events.MAX_REWARD_NAME]: value for name, value in rollout["rewards"].items() if name}
            if len(rewards) > events.MAX_REWARDS_PER_ROLLOUT:
                cut_rewards.add(number)
                rewards = dict(list(rewards.items())[:events.MAX_REWARDS_PER_ROLLOUT])
            rollout["rewards"] = rewards
        names = {name for rollout in step["rollouts"] for name in rollout["rewards"]}
        if len(names) > events.MAX_REWARD_NAMES_PER_STEP:
            kept = set(sorted(names)[:events.MAX_REWARD_NAMES_PER_STEP])
            cut_rewards.add(number)
            for rollout in step["rollouts"]:
                rollout["rewards"] = {k: v for k, v in rollout["rewards"].items() if k in kept}
    for name in sorted(long_names):
        run.skipped.append(Skip(name[:80], f"a metric name is 1-{events.MAX_METRIC_KEY} characters"))
    if cut_rewards:
        run.skipped.append(Skip(f"{len(cut_rewards)} steps' rewards", f"over {events.MAX_REWARDS_PER_ROLLOUT} reward "
                                f"names a rollout or {events.MAX_REWARD_NAMES_PER_STEP} a step: the first by name kept"))
    if too_many:
        run.skipped.append(Skip(f"{too_many} steps", f"over {events.MAX_METRICS_PER_STEP} metrics: the first "
                                f"{events.MAX_METRICS_PER_STEP} by name kept"))
    record = {"source": str(run.source), "format": run.origin, "importer": importer_version(), "summary": run.summary}
    run.config = _clean_json(run.config)
    record["summary"] = _clean_json(record["summary"])
    config = {**run.config, "_import": record}
    if _size(config) > events.MAX_CONFIG_BYTES:
        record["summary"] = {}
        run.skipped.append(Skip("summary", "the config with the summary is over 64 KiB: the summary is left out"))
        config = {**run.config, "_import": record}
    if _size(config) > events.MAX_CONFIG_BYTES:
        config = {"_import": record}
        run.skipped.append(Skip("config", f"over {events.MAX_CONFIG_BYTES // 1024} KiB as JSON: left out"))
    notes = _clean("\n".join(f"[{t['tag']} @ step {t['step']}] {t['text']}" for t in run.texts))
    if len(notes) > events.MAX_NOTES_CHARS:
        run.skipped.append(Skip("text summaries", f"{len(notes):,} characters; notes hold {events.MAX_NOTES_CHARS:,}: cut"))
        notes = notes[:events.MAX_NOTES_CHARS]
    last = max(run.steps, default=0)  # the source's steps are its whole run (a followed run's total is unknown: 0)
    return {"name": _clean(run.name)[:events.MAX_NAME_CHARS], "config": config, "notes": notes,
            "total_steps": min(last, events.MAX_TOTAL_STEPS)}


def _clean(text: str) -> str:
    """No database stores a NUL: it becomes U+FFFD, as the logging API stores a config's."""
    return text.replace("\x00", "\ufffd")


def _clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, dict):
        return {_clean(str(k)): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    return value


def _text(value: Any) -> Any:
    """A prompt or completion within the contract: NUL replaced, cut at MAX_TEXT characters."""
    if isinstance(value, str):
        return _clean(value)[:events.MAX_TEXT]
    room = events.MAX_TEXT
    messages = []
    for message in value:
        content = _clean(message["content"])[:max(0, room - len(message["role"]))]
        room -= len(message["role"]) + len(content)
        messages.append({"role": _clean(message["role"]), "content": content})
    return messages


def importer_version() -> str:
    """What read the run, recorded on it: Cohort's version and the readers' own (records.py)."""
    try:
        cohort = metadata.version("cohort")
    except metadata.PackageNotFoundError:  # a source checkout that is not installed
        cohort = "source"
    return f"cohort {cohort}, readers {IMPORTER_VERSION}"


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str, ensure_ascii=False).encode("utf-8"))


def import_plan(run: ImportedRun, *, most: int = 60) -> str:
    """What an import of `run` would write, as `--dry-run` prints it."""
    counts = run.metric_counts()
    steps = sorted(run.steps)
    rollouts = sum(len(s["rollouts"]) for s in run.steps.values())
    lines = [f"{run.origin} run {run.name!r} from {run.source}",
             f"  client id {run.client_id} (the same source imports into the same run)",
             f"  {len(steps):,} steps" + (f" ({steps[0]}-{steps[-1]})" if steps else "")
             + f", {len(counts)} metrics, {rollouts:,} rollouts, {len(run.config)} config keys"
             + (f", {len(run.texts)} text summaries" if run.texts else ""),
             f"  ends: {run.ended or 'succeeded (the source does not say)'}" + (f" ({run.error})" if run.error else "")]
    if counts:
        lines.append("  metrics (count, steps):")
        for name, (count, first, last) in sorted(counts.items())[:most]:
            lines.append(f"    {name}: {count:,} values, steps {first}-{last}")
        if len(counts) > most:
            lines.append(f"    ... and {len(counts) - most} more")
    for table in run.tables:
        lines.append(f"  table {table.name!r}: {table.rows:,} rows -> " + (
            f"rollouts at {table.steps} steps in {table.groups:,} groups (one per prompt a step)"
            if table.into == "rollouts" else table.into))
    if run.skipped:
        lines.append("  skipped:")
        lines.extend(f"    {skip.what}: {skip.reason}" for skip in run.skipped)
    return "\n".join(lines)
