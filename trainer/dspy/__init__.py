"""Train DSPy programs with Cohort (``pip install 'cohort[dspy]'``).

``DSPyProgram`` wraps a ``dspy.Module`` as an ``AgentProgram`` (one agent per predictor), so GRPO,
MMGRPO, MHGPO (forks by deterministic replay) and GDPO all train it; ``dspy_metric`` turns DSPy
metrics into rewards. Importing this package needs DSPy installed.
"""

try:
    import dspy  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("training DSPy programs needs DSPy: pip install 'cohort[dspy]'") from exc

from trainer.dspy.lm import PolicyLM
from trainer.dspy.metrics import dspy_metric, metric_score
from trainer.dspy.program import DSPyProgram, DSPyState
from trainer.dspy.rollout import ReplayDivergence

__all__ = ["DSPyProgram", "DSPyState", "PolicyLM", "ReplayDivergence", "dspy_metric", "metric_score"]
