"""The Credit section of the run page and the step page: the numbers of `selectors` and the change
of `change` put together, with the words that say why a number is absent."""

from __future__ import annotations

from dataclasses import dataclass, field

from webapp.runs.credit.change import OutputChange, output_change, retention_note, stored_step_range
from webapp.runs.credit.selectors import WINDOW_STEPS, ModuleSummary, StepCredit, step_credit, window_start
from webapp.runs.models import Run
from webapp.runs.params import INT_PARAM_MAX, BadParam

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
CHART_WIDTH, CHART_HEIGHT = 560, 140


@dataclass
class CreditReport:
    message: str = ""  # instead of the table: one module, nothing stored yet
    credit: StepCredit | None = None
    summary: list[ModuleSummary] = field(default_factory=list)
    change: OutputChange | None = None
    window: tuple[int, int] | None = None  # first and last step of the window
    chart: list[dict] = field(default_factory=list)  # per module: colour, SVG points
    window_steps: int = WINDOW_STEPS

    @property
    def no_advantages(self) -> bool:
        return self.credit is not None and not self.credit.advantages_stored


def program_is_multi_module(run: Run) -> bool:
    """Whether the run page and the step page show the Credit section: a program that names more than
    one module (or none), or a run trained elsewhere, whose one-module placeholder program does not say
    what its rollouts hold (the section then reads the modules from them). No query past the run's task."""
    if run.is_external:
        return True
    modules = run.task.program.modules if run.task_id else []
    return not isinstance(modules, list) or len(modules) != 1


def _finish(run: Run, report: CreditReport, credit: StepCredit) -> CreditReport:
    report.credit = credit
    if not credit.steps:
        report.message = "No step of this run has stored rollouts or groups yet: the credit appears with the first."
    elif len(credit.modules) <= 1:
        module = credit.modules[0] if credit.modules else "one module"
        declared = run.task.program.modules if run.task_id and not run.is_external else []
        if isinstance(declared, list) and len(declared) > 1:
            # A multi-module program whose rollouts all ended early: a format failure ends a trajectory.
            report.message = (f"Only {module} of the program's modules ({', '.join(map(str, declared))}) was called "
                              f"in these steps: every rollout ended there, so every advantage is its own and there "
                              f"is no credit to split between modules.")
        else:
            report.message = (f"This run's rollouts call one module ({module}): every advantage is its own, so "
                              f"there is no credit to split between modules.")
    else:
        report.summary = credit.summary()
    return report


def _attach_change(report: CreditReport, change: OutputChange) -> None:
    report.change = change
    for row in report.summary:
        row.change = change.modules.get(row.module)


def run_credit(run: Run, *, from_step: int | None = None, to_step: int | None = None) -> CreditReport:
    """The run page's section: the newest `WINDOW_STEPS` steps that hold rollouts, and the change from
    `from_step` (default: the earliest step that holds rollouts) to `to_step` (default: the newest)."""
    _check_order(from_step, to_step)
    first = window_start(run)
    report = _finish(run, CreditReport(), step_credit(run, first=first, last=INT_PARAM_MAX))
    if report.message:
        return report
    steps = report.credit.steps
    report.window = (steps[0], steps[-1])
    report.chart = share_chart(report.credit)
    stored_first, stored_last = stored_step_range(run)
    start = from_step if from_step is not None else stored_first
    end = to_step if to_step is not None else stored_last
    if (from_step is not None or to_step is not None) and start is not None and end is not None:
        _check_order(start, end)
    if from_step is None and to_step is None and (stored_first is None or stored_first == stored_last):
        change = OutputChange(stored_first, stored_last, absent=" ".join(filter(None, [
            "Only one step of this run holds rollouts: there is no earlier step to compare its outputs with.",
            retention_note(run, stored_first).replace("The change is measured from", "Its outputs are stored from")])))
    else:
        change = _measured_change(run, start, end, defaulted_from=from_step is None, stored_first=stored_first)
    _attach_change(report, change)
    return report


def _measured_change(run: Run, start: int, end: int, *, defaulted_from: bool, stored_first: int | None) -> OutputChange:
    """The change from `start` to `end`; when `start` is the run's earliest stored step (no `from` asked),
    its note also says whether retention dropped the steps before it."""
    change = output_change(run, start, end)
    if defaulted_from:
        change.note = " ".join(filter(None, [retention_note(run, stored_first), change.note]))
    return change


def step_report(run: Run, step: int, attempt: int, *, from_step: int | None = None) -> CreditReport:
    """The step page's section: this step's credit, and the change from `from_step` (default: the run's
    earliest step that holds rollouts) to this step."""
    _check_order(from_step, step, later_name=f"this step ({step})")
    report = _finish(run, CreditReport(), step_credit(run, first=step, last=step, attempt=attempt))
    if report.message:
        return report
    report.window = (step, step)
    stored_first, _ = stored_step_range(run)
    start = from_step if from_step is not None else stored_first
    if from_step is None and (stored_first is None or stored_first >= step):
        change = OutputChange(stored_first, step, absent=(
            f"Step {step} is the earliest step of this run that holds rollouts: there is no earlier step to compare with."))
    else:
        change = _measured_change(run, start, step, defaulted_from=from_step is None, stored_first=stored_first)
    _attach_change(report, change)
    return report


def _check_order(earlier: int | None, later: int | None, *, later_name: str = "'to'") -> None:
    """A `from` that is not before `to` is a bad request: the change compares a later step with an
    earlier one."""
    if earlier is not None and later is not None and earlier >= later:
        raise BadParam(f"'from' must be an earlier step than {later_name}: from={earlier}, to={later}.")


def step_section(run: Run, step: int, attempt: int, *, from_step: int | None = None) -> CreditReport | None:
    """The step page's section, or None for a run whose program has one module (no section)."""
    return step_report(run, step, attempt, from_step=from_step) if program_is_multi_module(run) else None


def share_chart(credit: StepCredit) -> list[dict]:
    """Each module's share per window step as an SVG polyline (x: step, y: share 0..1); a step where
    the share is undefined breaks the line."""
    steps = credit.steps
    if len(steps) < 2:
        return []
    lo, hi = steps[0], steps[-1]

    def x(step: int) -> float:
        return round(4 + (step - lo) / (hi - lo) * (CHART_WIDTH - 8), 1)

    def y(share: float) -> float:
        return round(CHART_HEIGHT - 4 - share * (CHART_HEIGHT - 8), 1)

    lines = []
    for i, module in enumerate(credit.modules):
        runs, current = [], []
        for step in steps:
            cell = credit.of(module, step)
            if cell is None or cell.share is None:
                if current:
                    runs.append(current)
                current = []
                continue
            current.append(f"{x(step)},{y(cell.share)}")
        if current:
            runs.append(current)
        lines.append({"module": module, "colour": PALETTE[i % len(PALETTE)], "segments": [" ".join(r) for r in runs]})
    return lines
