"""How one token reads on the pages, and which of a fork's alternatives is the sampled one.

A token is shown by its text with its whitespace drawn (· a space, ⏎ a newline, ⇥ a tab), except a
byte token: one that is part of a multi-byte character (byte-level BPE splits an emoji or a CJK
character it has no token for into such tokens), whose text on its own is the replacement character
U+FFFD. It is shown by its bytes, ⟨E2 80⟩, where the trainer stored them
(trainer/run/token_bytes.py), else as ⟨?⟩: two different byte tokens never read alike as `�`.

A fork's alternatives are matched to the sampled token by token id where the trainer sent the ids,
else by bytes, else by text (an external trainer's), and never by a text that is only `�`.
"""

from __future__ import annotations

import math

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from webapp.runs.ingest.tokens import Alternative, CallTokens

# A fork is among the step's most uncertain positions, whatever their entropy: the pages call one
# "high-entropy" only from this many nats, the entropy of a fair coin toss between two tokens.
HIGH_ENTROPY_NATS = math.log(2)
WHITESPACE_SHOWN = str.maketrans({" ": "·", "\n": "⏎", "\t": "⇥", "\r": "␍"})
REPLACEMENT = "\ufffd"
UNKNOWN_BYTES = "⟨?⟩"  # a byte token whose bytes were not stored
BYTES_TITLE = "bytes of a multi-byte character, split across tokens"
UNKNOWN_TITLE = "part of a multi-byte character; this run did not store its bytes"


def visible_whitespace(text: str) -> str:
    """`text` with its spaces, newlines and tabs drawn (a token is often just one of them)."""
    return text.translate(WHITESPACE_SHOWN)


def bytes_label(data: bytes) -> str:
    """⟨E2 80⟩: bytes in upper-case hex, a no-break space between them (not drawn as a space, not
    broken over two lines)."""
    return "⟨" + "\u00a0".join(f"{b:02X}" for b in data) + "⟩"


def piece_parts(piece: str, hexed: str | None = None) -> list[tuple[str, str]]:
    """The piece as ('text', characters) and ('bytes', ⟨..⟩ label) parts: with its bytes (`hexed`),
    the whole UTF-8 characters among them as text, the rest as byte labels; without, each run of
    U+FFFD as UNKNOWN_BYTES ('unknown')."""
    if hexed:
        return _byte_parts(bytes.fromhex(hexed))
    parts: list[tuple[str, str]] = []
    for i, chunk in enumerate(piece.split(REPLACEMENT)):
        if i:
            parts.append(("unknown", UNKNOWN_BYTES))
        if chunk:
            parts.append(("text", chunk))
    return parts


def _byte_parts(data: bytes) -> list[tuple[str, str]]:
    parts: list[tuple[str, str]] = []
    invalid = bytearray()
    while data:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            text, invalid_part, data = (data[:error.start].decode("utf-8"), data[error.start:error.end],
                                        data[error.end:])
        else:
            invalid_part, data = b"", b""
        if text:
            if invalid:
                parts.append(("bytes", bytes_label(bytes(invalid))))
                invalid.clear()
            parts.append(("text", text))
        invalid += invalid_part
    if invalid:
        parts.append(("bytes", bytes_label(bytes(invalid))))
    return parts


def piece_label(piece: str, hexed: str | None = None) -> str:
    """The token as the inspector's token view writes it: its text, byte tokens as ⟨E2 80⟩ (or ⟨?⟩)."""
    return "".join(value for _, value in piece_parts(piece, hexed))


def piece_text(piece: str, hexed: str | None = None) -> str:
    """The token as plain text: whitespace drawn, byte tokens as ⟨E2 80⟩ (or ⟨?⟩)."""
    return "".join(visible_whitespace(value) if kind == "text" else value for kind, value in piece_parts(piece, hexed))


def piece_html(piece: str, hexed: str | None = None) -> SafeString:
    """The token as HTML: each whitespace character a faint `·`, `⏎`, `⇥` (class "ws"), its bytes a
    `<span class="bytes">⟨E2 80⟩</span>` explained by a title."""
    out = []
    for kind, value in piece_parts(piece, hexed):
        if kind == "text":
            for char in value:
                shown = char.translate(WHITESPACE_SHOWN)
                out.append(f'<span class="ws">{shown}</span>' if shown != char else escape(char))
        else:
            title = BYTES_TITLE if kind == "bytes" else UNKNOWN_TITLE
            out.append(f'<span class="bytes" title="{title}">{escape(value)}</span>')
    return mark_safe("".join(out))  # every character escaped or one of ours


def is_byte_token(piece: str, hexed: str | None = None) -> bool:
    return bool(hexed) or REPLACEMENT in piece


def is_sampled(alternative: Alternative, tokens: CallTokens, index: int) -> bool:
    """Whether `alternative` (kept at token `index` of `tokens`) is the token sampled there: by id
    where both are known, else by bytes where either is a byte token with bytes, else by text; a
    byte token without bytes or id matches nothing (`�` does not tell which one it was)."""
    sampled_id = tokens.sampled_ids.get(index)
    if sampled_id is not None and alternative.id is not None:
        return alternative.id == sampled_id
    sampled_hex = tokens.byte_pieces.get(index)
    if sampled_hex or alternative.hex:
        return sampled_hex == alternative.hex
    piece = tokens.pieces[index]
    return REPLACEMENT not in piece and alternative.piece == piece


def token_key(tokens: CallTokens, index: int) -> tuple[str, str | None]:
    """What tells token `index` apart from another call's: its text and, for a byte token, its bytes."""
    return tokens.pieces[index], tokens.byte_pieces.get(index)
