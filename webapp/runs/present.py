"""HTML for the trajectory grid's cells, built in Python: a paper-scale grid has over a hundred
cells, and rendering each through template tags (`{% url %}`, `floatformat`) took most of the
page's time. Everything user-supplied goes through `format_html` / `escape`."""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from webapp.runs.inspect import Cell, Grid


def fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


class _Urls:
    """URL patterns reversed once per page, filled in per object (reverse() per cell is slow)."""

    def __init__(self, run_id: int):
        self.prompt = reverse("runs:call_prompt", args=[run_id, 987654321])
        self.group = reverse("runs:group", args=[run_id, 987654321])

    def prompt_of(self, call_id: int) -> str:
        return self.prompt.replace("987654321", str(call_id))

    def group_of(self, group_id: int) -> str:
        return self.group.replace("987654321", str(group_id))


def cell_classes(cell: Cell) -> str:
    classes = ["cell"]
    if cell.missing:
        classes.append("missing")
    if cell.differs:
        classes.append("differs")
    if cell.padded_from:
        classes.append("padded")
    if cell.duplicates:
        classes.append("dup")
    if cell.call is not None and not cell.call.parsed_ok:
        classes.append("parse-bad")
    return " ".join(classes)


def cell_html(cell: Cell, urls: _Urls) -> SafeString:
    parts: list[str] = []
    call = cell.call
    if call is not None:
        words = "".join(f"<mark>{escape(text)}</mark> " if marked else f"{escape(text)} " for text, marked in cell.segments)
        parts.append(f'<div class="completion">{words}</div>')
        parts.append(format_html(
            '<div class="nums"><span class="badge {}">{}</span> <span title="agent-specific reward">spec {}</span> '
            '<span title="propagated (shared) reward">prop {}</span> <span title="advantage">adv <strong>{}</strong>'
            '</span></div>', "good" if call.parsed_ok else "bad", "parsed" if call.parsed_ok else "parse failed",
            fmt(call.specific_reward, 2), fmt(call.propagated_reward, 2), fmt(call.advantage, 3)))
        parts.append(format_html('<button type="button" class="link prompt-toggle" data-url="{}">prompt</button>'
                                 '<pre class="prompt" hidden></pre>', urls.prompt_of(call.pk)))
    else:
        parts.append('<div class="muted">missing</div>')
    if cell.padded_from:
        parts.append(format_html('<div class="mark-note">padded: copy of {}</div>', ", ".join(cell.padded_from)))
    if cell.duplicates:
        parts.append(format_html('<div class="mark-note">duplicated ×{} in its group</div>', cell.duplicates))
    if cell.groups:
        links = format_html_join(" ", '<a href="{}" class="group-link {}">group {} · {}</a>',
                                 ((urls.group_of(gid), kind, gid, kind) for gid, kind in cell.groups))
        parts.append(format_html('<div class="small">{}</div>', links))
    return mark_safe(f'<td class="{cell_classes(cell)}">{"".join(parts)}</td>')  # every part was escaped above


def grid_rows_html(grid: Grid, run_id: int) -> list[tuple]:
    """(row, [cell html]) per rollout row."""
    urls = _Urls(run_id)
    return [(row, [cell_html(cell, urls) for cell in row.cells]) for row in grid.rows]
