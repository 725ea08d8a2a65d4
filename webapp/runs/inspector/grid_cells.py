"""HTML for the trajectory grid's cells, built in Python: a paper-scale grid has over a hundred
cells, and rendering each through template tags (`{% url %}`, `floatformat`) took most of the
page's time. Everything user-supplied goes through `format_html` / `escape`."""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from webapp.runs.inspector.divergence import Divergence
from webapp.runs.inspector.steps import Cell, Grid, Slot
from webapp.runs.inspector.token_cells import cell_key


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


def example_history_url(run_id: int, example_id: str) -> str:
    """The history page of an example. Ids are free text (uploaded datasets): the path form
    `/runs/<id>/examples/<example_id>/` carries any id with its slashes, except those a browser
    would rewrite (empty, or a '.' or '..' segment), which go in `?example=` instead."""
    if example_id and not {".", ".."} & set(example_id.split("/")):
        return reverse("runs:example_history", args=[run_id, example_id])
    return reverse("runs:example_history_query", args=[run_id]) + "?" + urlencode({"example": example_id})


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


def _segments_html(segments: list[tuple[str, bool]], diverge_word: int | None) -> str:
    """The completion's segments (marked where they differ from the slot's modal completion), with
    whitespace-separated word number `diverge_word` also wrapped in `<mark class="diverge-word">`.
    Segments split on spaces, so no word spans two of them and counting words per segment works."""
    out, seen = [], 0
    for text, marked in segments:
        if diverge_word is None or not seen <= diverge_word < seen + len(text.split()):
            seen += len(text.split())
            html = escape(text)
        else:
            pieces = []
            for piece in re.split(r"(\s+)", text):
                if piece and not piece.isspace():
                    pieces.append(f'<mark class="diverge-word">{escape(piece)}</mark>' if seen == diverge_word
                                  else escape(piece))
                    seen += 1
                else:
                    pieces.append(escape(piece))
            html = "".join(pieces)
        out.append(f"<mark>{html}</mark> " if marked else f"{html} ")
    return "".join(out)


def cell_html(cell: Cell, urls: _Urls, diverge: tuple[str, int | None] | None = None,
              token_key: str | None = None) -> SafeString:
    """One grid cell; `diverge` = (note, word index) marks the cell where the best and the worst
    rollout part (class `diverge`, the note, the first differing word highlighted); `token_key` names
    the call's tokens in the page's token JSON (static/js/tokens.js draws them), where it has some."""
    parts: list[str] = []
    call = cell.call
    if diverge is not None:
        parts.append(format_html('<div class="diverge-note">{}</div>', diverge[0]))
    if call is not None:
        words = _segments_html(cell.segments, diverge[1] if diverge else None)
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
    classes = cell_classes(cell) + (" diverge" if diverge is not None else "")
    tokens = f' data-tokens="{escape(token_key)}"' if token_key else ""
    return mark_safe(f'<td class="{classes}"{tokens}>{"".join(parts)}</td>')  # every part was escaped above


def _diverge_marks(grid: Grid, divergence: Divergence | None) -> dict[tuple[int, int], tuple[str, int | None]]:
    """{(rollout index, column): (note, word index)} for the two cells where best and worst part."""
    if divergence is None or divergence.identical:
        return {}
    column = {slot: i for i, slot in enumerate(grid.slots)}
    present = divergence.best_call or divergence.worst_call  # at least one side has a call there
    marks = {}
    for side, trace, call in (("best", divergence.best, divergence.best_call),
                              ("worst", divergence.worst, divergence.worst_call)):
        slot: Slot = ((call or present).module, (call or present).invocation)
        if slot not in column:
            continue
        note = "best and worst part here"
        if call is None:
            note += f": the {side} rollout has no call {divergence.call_number}"
        elif divergence.word_number is not None:
            note += f" (word {divergence.word_number})"
        marks[(trace.index, column[slot])] = (note, divergence.word_index if call is not None else None)
    return marks


def grid_rows_html(grid: Grid, run_id: int, divergence: Divergence | None = None,
                   token_cells: Collection[str] = ()) -> list[tuple]:
    """(row, [cell html]) per rollout row; `divergence` marks where the best and the worst rollout part;
    `token_cells` are the calls (webapp/runs/inspector/token_cells.py `cell_key`) whose tokens the page carries."""
    urls = _Urls(run_id)
    marks = _diverge_marks(grid, divergence)

    def key(row, cell) -> str | None:
        found = cell_key(row.rollout.index, cell.call.position) if cell.call is not None else None
        return found if found in token_cells else None

    return [(row, [cell_html(cell, urls, marks.get((row.rollout.index, col)), key(row, cell))
                   for col, cell in enumerate(row.cells)])
            for row in grid.rows]
