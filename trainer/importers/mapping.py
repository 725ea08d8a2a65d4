"""Renaming an imported run's metrics onto Cohort's names, from a TOML file the user can read.

    # trl.toml: TRL logged to W&B, charted as Cohort's runs are
    [metrics]
    "train/reward" = "reward/mean"
    "train/rewards/accuracy_reward/mean" = "reward/accuracy_reward"
    "train/frac_reward_zero_std" = "zero_var_share"

    [options]
    keep_original = true   # also keep the metric under its own name (default: false, renamed only)

Names are kept as they are unless the file renames them, so nothing is guessed; a rename onto a name the
source also logs is an error (two values would fight for one curve).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from trainer.importers.records import ImportedRun


@dataclass
class MetricMapping:
    renames: dict[str, str] = field(default_factory=dict)
    keep_original: bool = False

    @classmethod
    def load(cls, path: Path) -> MetricMapping:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{path}: not a readable TOML mapping ({exc})") from None
        unknown = set(data) - {"metrics", "options"}
        if unknown:
            raise ValueError(f"{path}: unknown table(s) {', '.join(sorted(unknown))}: a mapping has [metrics] and [options]")
        renames = data.get("metrics", {})
        bad = [k for k, v in renames.items() if not isinstance(v, str) or not v.strip()]
        if bad:
            raise ValueError(f"{path}: [metrics] {bad[0]!r} must be renamed to a non-empty name")
        options = data.get("options", {})
        keep = options.get("keep_original", False)
        if not isinstance(keep, bool):
            raise ValueError(f"{path}: [options] keep_original must be true or false")
        return cls(renames=dict(renames), keep_original=keep)

    def apply(self, run: ImportedRun) -> None:
        """Renames the run's metrics in place; ValueError when a new name is also one of the source's."""
        if not self.renames:
            return
        logged = {name for step in run.steps.values() for name in step["metrics"]}
        clash = sorted(new for old, new in self.renames.items() if old in logged and new in logged
                       and (self.keep_original or new not in self.renames))
        if clash:
            raise ValueError(f"the mapping renames onto {clash[0]!r}, which the source logs too")
        for step in run.steps.values():
            metrics = step["metrics"]
            for old, new in self.renames.items():
                if old in metrics:
                    metrics[new] = metrics[old] if self.keep_original else metrics.pop(old)
