"""The bytes of the tokens that are part of a multi-byte character.

A byte-level BPE tokenizer (GPT-2, SmolLM2, Qwen, Llama 3) or a SentencePiece one with byte fallback
splits a character it has no token for into byte tokens: decoded on its own, each reads U+FFFD (the
replacement character), so two different ones look alike. Their bytes tell them apart; the dashboard
shows them as ⟨E2 80⟩ (the data contract's "bytes" in trainer/run/token_details.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

REPLACEMENT = "\ufffd"
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte tokens


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet inverted: the character a byte-level BPE token spells each byte with."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def raw_token_bytes(token: str) -> bytes | None:
    """The bytes a tokenizer's raw token string stands for (`convert_ids_to_tokens`), None when it is
    neither a byte-level BPE token nor a SentencePiece byte token. Asked only about tokens whose piece
    reads U+FFFD (`byte_pieces`): any ASCII token string would pass for byte-level BPE."""
    match = _BYTE_FALLBACK.fullmatch(token)
    if match:
        return bytes.fromhex(match.group(1))
    decoder = byte_decoder()
    if token and all(c in decoder for c in token):
        return bytes(decoder[c] for c in token)
    return None


def byte_pieces(tokenizer: Any, pieces: Mapping[int, str]) -> dict[int, str]:
    """{id: its bytes in hex} of the ids whose decoded piece has a replacement character and whose
    bytes are not whole UTF-8 (a token that is U+FFFD itself keeps its text)."""
    suspects = [i for i, piece in pieces.items() if REPLACEMENT in piece]
    if not suspects:
        return {}
    out = {}
    for token_id, token in zip(suspects, _raw_tokens(tokenizer, suspects), strict=True):
        data = raw_token_bytes(token) if isinstance(token, str) else None
        if data is not None and not _whole_utf8(data):
            out[token_id] = data.hex()
    return out


def _raw_tokens(tokenizer: Any, ids: Iterable[int]) -> list[Any]:
    ids = list(ids)
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    return list(convert(ids)) if convert is not None else [None] * len(ids)


def _whole_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
