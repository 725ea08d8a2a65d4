"""The papers' equations as MathML, rendered at build time: a browser draws MathML itself, so the
manual shows them offline with no JavaScript (MathJax or KaTeX would be fetched or vendored).
Display math is a `$$` line, the LaTeX, and a `$$` line; inline math is `\\( ... \\)`. Code blocks
are left alone."""

from __future__ import annotations

import re

from latex2mathml.converter import convert

INLINE = re.compile(r"\\\((.+?)\\\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def render_math(markdown: str) -> str:
    out: list[str] = []
    display: list[str] | None = None
    fenced = False
    for line in markdown.split("\n"):
        if display is not None:
            if line.strip() == "$$":
                out.append(convert(" ".join(display), display="block"))
                display = None
            else:
                display.append(line)
            continue
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.strip() == "$$":
            display = []
            continue
        elif not fenced:
            # In a span: a line that starts with a <math> tag would be read as a raw HTML block.
            line = INLINE.sub(lambda m: f'<span class="math">{convert(m[1])}</span>', line)
        out.append(line)
    if display is not None:
        raise ValueError("a `$$` display equation is never closed")
    return "\n".join(out)
