"""The across-runs table's body, built in Python (as the trajectory grid's cells are,
webapp/runs/inspector/grid_cells.py): two columns of a few hundred visits are over a thousand cells,
and rendering each through template tags took seconds. Every answer and label is escaped here;
the diffs' HTML is escaped by webapp/runs/examples/diffs.py."""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from webapp.runs.examples.across import Across, Cell, Line


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _line_html(line: Line) -> str:
    shown = line.previous_html if line.against_previous is not None else escape(line.text)
    out = [f'<div class="answer" data-module="{escape(line.key[0])}"><span class="module">{escape(line.label)}</span>'
           f'<pre class="text">{shown}</pre>']
    if line.changed_from_first:
        out.append(f'<details class="vs-first"><summary>against the first column</summary>'
                   f'<pre class="text">{line.first_html}</pre></details>')
    out.append("</div>")
    return "".join(out)


def _cell_html(cell: Cell) -> str:
    classes = "cell" + (" right" if cell.right else "") + (" first-right" if cell.first_right else "")
    head = [f'<a href="{escape(cell.url)}" class="step-link">step {cell.step}</a>']
    if cell.attempt > 1:
        head.append(f'<span class="muted small">attempt {cell.attempt}</span>')
    head.append(f'<span class="reward" title="the best rollout&#x27;s total reward">{_num(cell.best_reward, 3)}</span>')
    head.append(f'<span class="spread muted small" title="the visit&#x27;s {cell.rollouts} rollout rewards: min–max '
                f'and std">{_num(cell.low, 2)}–{_num(cell.high, 2)} σ {_num(cell.std, 2)}</span>')
    if cell.failures:
        head.append(f'<span class="badge bad">{cell.failures} failed</span>')
    if cell.first_right:
        head.append('<span class="badge good first-right-mark">first right</span>')
    elif cell.right:
        head.append('<span class="badge good">right</span>')
    lines = "".join(_line_html(line) for line in cell.lines) or \
        '<p class="muted small">No module call stored for the best rollout.</p>'
    return f'<td class="{classes}" data-step="{cell.step}"><div class="cell-head">{" ".join(head)}</div>{lines}</td>'


def rows_html(across: Across) -> SafeString:
    """The table's rows: a key cell, then a cell per column (empty where the column has no visit)."""
    out = []
    for row in across.rows:
        cells = "".join(_cell_html(c) if c is not None else '<td class="cell empty"></td>' for c in row.cells)
        out.append(f'<tr class="across-row"><th class="row-key">{escape(row.label)}</th>{cells}</tr>')
    return mark_safe("".join(out))  # noqa: S308 - every value is escaped above
