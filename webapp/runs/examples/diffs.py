"""Word-level diffs of two answers, for the across-runs view (issue 57, item 1).

The texts are split into words and the whitespace between them, and difflib's SequenceMatcher
(Ratcliff-Obershelp matching) aligns the two word sequences. Only words are compared: a change of
spacing alone (a newline for a space) is not a change, and the new text's own whitespace is kept,
so the diff reads as the new answer with the words it added in <ins> and those it lost in <del>.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

TOKEN = re.compile(r"\s+|\S+")
# SequenceMatcher's "junk" heuristic drops words that are over 1% of a long text (common words):
# off, so a diff marks exactly the changed words.
AUTOJUNK = False


@dataclass(frozen=True)
class Piece:
    """A run of the diff: `op` is "same", "ins" (only in the new text) or "del" (only in the old)."""

    op: str
    text: str


@functools.lru_cache(maxsize=2048)  # a visit's answer is diffed twice: down its column and across its row
def _tokens(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(words, the whitespace before each word) of `text`; a trailing whitespace run is dropped."""
    words, spaces, pending = [], [], ""
    for token in TOKEN.findall(text or ""):
        if token.isspace():
            pending += token
        else:
            words.append(token)
            spaces.append(pending)
            pending = ""
    return tuple(words), tuple(spaces)


def word_diff(old: str | None, new: str | None) -> list[Piece]:
    """The pieces that turn `old` into `new`, word by word; adjacent pieces of one kind are merged.
    A deletion comes before the insertion that replaces it."""
    if (old or "") == (new or ""):
        return [Piece("same", new)] if new else []
    old_words, old_spaces = _tokens(old or "")
    new_words, new_spaces = _tokens(new or "")
    matcher = difflib.SequenceMatcher(None, old_words, new_words, autojunk=AUTOJUNK)
    pieces: list[Piece] = []

    def add(op: str, text: str) -> None:
        if pieces and pieces[-1].op == op:
            pieces[-1] = Piece(op, pieces[-1].text + text)
        else:
            pieces.append(Piece(op, text))

    def segment(op: str, words: list[str], spaces: list[str], start: int, end: int, lead: str) -> None:
        # The whitespace before a segment stays outside its mark; between two segments there is some.
        if pieces:
            add("same", lead or " ")
        add(op, "".join((spaces[k] if k > start else "") + words[k] for k in range(start, end)))

    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            segment("same", new_words, new_spaces, j1, j2, new_spaces[j1])
            continue
        if tag in ("delete", "replace"):
            segment("del", old_words, old_spaces, i1, i2, new_spaces[j1] if j1 < len(new_spaces) else " ")
        if tag in ("insert", "replace"):
            segment("ins", new_words, new_spaces, j1, j2, new_spaces[j1] if tag == "insert" else " ")
    return [p for p in pieces if p.text]


def changed_words(pieces: list[Piece]) -> tuple[list[str], list[str]]:
    """(inserted words, deleted words) of a diff, in order: what a test or a summary counts."""
    inserted = [w for p in pieces if p.op == "ins" for w in p.text.split()]
    deleted = [w for p in pieces if p.op == "del" for w in p.text.split()]
    return inserted, deleted


def diff_html(pieces: list[Piece]) -> SafeString:
    """The diff as HTML: unchanged text escaped, inserted words in <ins>, deleted ones in <del>."""
    out = []
    for piece in pieces:
        text = escape(piece.text)
        out.append(text if piece.op == "same" else f"<{piece.op}>{text}</{piece.op}>")
    return mark_safe("".join(out))  # noqa: S308 - every piece is escaped above
