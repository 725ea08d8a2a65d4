"""The fenced code blocks of the manual's pages, as CI runs them (docs/contributing.md, "Code blocks in
the manual"): each block's language says what CI does with it, a `title="file"` saves it as a file of
the page's working folder, and `<!-- not-run: REASON -->` on the line before a fence skips it with that
reason. A block that breaks a rule is a `BlockError` naming the page and line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

# The pages whose blocks CI runs: what a reader copies into a terminal or an editor.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md")),
         *sorted((ROOT / "docs" / "how-to").glob("*.md"))]

RUNNABLE = {"python", "sh", "bash", "toml", "json"}
# Output, a diagram or a folder tree: read, never run.
NOT_CODE = {"text"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*)$")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')


class BlockError(ValueError):
    """A page breaks the code-block rules."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the opening fence's line number (1-based)
    lang: str
    title: str | None
    text: str
    not_run: str | None  # the reason it is not run, when it is marked

    @property
    def where(self) -> str:
        return f"{_shown(self.page)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.not_run is None and self.lang not in NOT_CODE


def _shown(page: Path) -> Path:
    return page.relative_to(ROOT) if page.is_relative_to(ROOT) else page


def page_blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in order; raises `BlockError` for a fence with no language, a language
    CI cannot run and no reason not to, a not-run mark without a reason or without a fence after it,
    or a fence never closed."""
    lines = page.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    rel = _shown(page)
    i = 0
    while i < len(lines):
        marker = NOT_RUN.match(lines[i])
        opening = FENCE.match(lines[i])
        if marker:
            reason = marker["reason"].strip()
            if not reason:
                raise BlockError(f"{rel}:{i + 1}: `<!-- not-run: -->` needs a reason after the colon")
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                raise BlockError(f"{rel}:{i + 1}: a not-run mark must stand on the line just before a fence")
            i += 1
            continue
        if not opening:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        lang = info.split()[0].strip("{}.").lower() if info else ""
        title = TITLE.search(info)
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise BlockError(f"{rel}:{i + 1}: this fence is never closed")
        previous = NOT_RUN.match(lines[i - 1]) if i else None
        block = Block(page, i + 1, lang, title["title"] if title else None, "\n".join(body) + "\n",
                      previous["reason"].strip() if previous else None)
        if not lang:
            raise BlockError(f"{rel}:{i + 1}: a fence must name its language (python, sh, toml, json, text)")
        if lang not in RUNNABLE | NOT_CODE and block.not_run is None:
            raise BlockError(f"{rel}:{i + 1}: CI cannot run a `{lang}` block: use one of "
                             f"{', '.join(sorted(RUNNABLE | NOT_CODE))} or mark it `<!-- not-run: reason -->`")
        blocks.append(block)
        i = j + 1
    return blocks
