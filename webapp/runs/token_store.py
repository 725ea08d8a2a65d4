"""Per-token details of module calls (issue 45), stored beside their texts in the example's `CallText` row.

A call's details arrive in its step event as `{"pieces", "sampler", "trainer", "entropy", "topk"}`
(trainer/rollouts/trajectory.py `ModuleCall.tokens`; the SDK's `tokens` / `logprobs` / `entropies`).
Every call of one example at one step goes into one zlib stream, `CallText.tokens`:

    a JSON header (per call: rollout index, position, tokens, which arrays, and what the text cannot
    say), a NUL byte, every call's piece lengths (uint8), then every call's arrays as 16-bit
    integers, byte-shuffled (all the high bytes, then all the low bytes).

A piece is stored as its length in characters when the completion's text continues with it (byte-level
BPE tokens decoded one by one rebuild the text); a piece that does not (an end-of-turn token the text
skips, half of a multi-byte character) is stored as text in the header under length 255.

Numbers are fixed-point in thousandths of a nat: a log-prob as -1000 lp and an entropy as 1000 H
(uint16; 65,535 for unknown, so down to -65.5 nats), and the sampler's log-prob, where the trainer's
is known, as its difference from the trainer's (int16). A near-certain token then stores mostly zero
bytes, which zlib squeezes: 4.4 bytes a token against 6.6 for float16 arrays on SmolLM2-tokenized
completions (benchmarks/storage.py has the figure in PostgreSQL). A thousandth of a nat is finer
than anything the inspector colours or the 0.1-nat mismatch threshold needs (float16 keeps -7 nats
to 0.004). The top-k alternatives, kept at a step's forks only, stay JSON in the header.

Decoding needs each call's completion (`decode_tokens(blob, completions)`), which its texts hold.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Place = tuple[int, int]  # (rollout index within the step, position of the call in its rollout)
EXPLICIT = 255  # a piece length byte: the piece is in the header, not in the text


@dataclass
class CallTokens:
    """One call's completion token by token. Arrays have one value per piece; None where unknown."""

    pieces: list[str]
    sampler: list[float | None] | None = None
    trainer: list[float | None] | None = None
    entropy: list[float | None] | None = None
    topk: dict[int, list[tuple[str, float]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.pieces)

    def logprob(self, i: int) -> float | None:
        """The log-prob the inspector shows: the trainer's, else the sampler's."""
        for values in (self.trainer, self.sampler):
            if values is not None and values[i] is not None:
                return values[i]
        return None

    def mismatch(self, i: int) -> float | None:
        """|log pi_sampler - log pi_trainer| of token i, where both are known."""
        if self.sampler is None or self.trainer is None or self.sampler[i] is None or self.trainer[i] is None:
            return None
        return abs(self.sampler[i] - self.trainer[i])


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _piece_lengths(pieces: Sequence[str], completion: str) -> tuple[bytes, dict[str, str]]:
    """Each piece's length where the text continues with it, else EXPLICIT and the piece in `extra`."""
    lengths, extra, cursor = bytearray(), {}, 0
    for i, piece in enumerate(pieces):
        if piece and len(piece) < EXPLICIT and completion.startswith(piece, cursor):
            lengths.append(len(piece))
            cursor += len(piece)
        else:
            lengths.append(EXPLICIT)
            extra[str(i)] = piece
    return bytes(lengths), extra


UNKNOWN_U16, UNKNOWN_I16 = 65535, -32768
SAMPLER, TRAINER, ENTROPY, SAMPLER_DELTA = 1, 2, 4, 8  # a call's array flags


def _milli(values: Sequence[Any], n: int, sign: float) -> list[int | None]:
    """n values (padded or cut) as whole thousandths of `sign` * value; None where unknown."""
    out = []
    for v in list(values[:n]) + [None] * (n - len(values)):
        v = _finite(v)
        out.append(None if v is None else round(sign * v * 1000))
    return out


def _uint16(milli: list[int | None]) -> np.ndarray:
    return np.array([UNKNOWN_U16 if m is None else min(max(m, 0), UNKNOWN_U16 - 1) for m in milli], dtype="<u2")


def _delta16(sampler: list[int | None], trainer: list[int | None]) -> np.ndarray | None:
    """The sampler's log-prob minus the trainer's, where every known one has a known partner in range."""
    deltas = []
    for s, t in zip(sampler, trainer, strict=True):
        if s is None:
            deltas.append(UNKNOWN_I16)
        elif t is None or not -32767 <= t - s <= 32767:
            return None
        else:
            deltas.append(t - s)  # (-1000 lp_trainer) - (-1000 lp_sampler) = 1000 (lp_sampler - lp_trainer)
    return np.array(deltas, dtype="<i2")


def encode_tokens(calls: Sequence[tuple[Place, str, Mapping[str, Any] | None]]) -> bytes | None:
    """(place, completion, details) of an example's calls as one zlib stream; None when no call has
    details. A call whose details are missing or have no pieces is left out."""
    header, lengths, numbers = [], [], []
    for (rollout, position), completion, details in calls:
        pieces = [str(p) for p in (details or {}).get("pieces") or ()]
        if not pieces:
            continue
        n = len(pieces)
        piece_lengths, extra = _piece_lengths(pieces, completion)
        lengths.append(piece_lengths)
        flags, arrays = 0, []
        trainer = _milli(details["trainer"], n, -1.0) if details.get("trainer") is not None else None
        if details.get("sampler") is not None:
            sampler = _milli(details["sampler"], n, -1.0)
            delta = _delta16(sampler, trainer) if trainer is not None else None
            flags |= SAMPLER | (SAMPLER_DELTA if delta is not None else 0)
            arrays.append(delta if delta is not None else _uint16(sampler))
        if trainer is not None:
            flags |= TRAINER
            arrays.append(_uint16(trainer))
        if details.get("entropy") is not None:
            flags |= ENTROPY
            arrays.append(_uint16(_milli(details["entropy"], n, 1.0)))
        numbers.extend(a.tobytes() for a in arrays)
        topk = [[int(pos), [[str(piece), round(float(p), 4)] for piece, p in alternatives]]
                for pos, alternatives in details.get("topk") or () if 0 <= int(pos) < n]
        header.append([rollout, position, n, flags, extra or 0, topk or 0])
    if not header:
        return None
    shuffled = np.frombuffer(b"".join(numbers), dtype=np.uint8).reshape(-1, 2).T.tobytes()
    head = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return zlib.compress(head + b"\0" + b"".join(lengths) + shuffled, 9)


def _values(array: np.ndarray, scale: float) -> list[float | None]:
    return [None if v == UNKNOWN_U16 else round(v * scale, 3) for v in array.tolist()]


def decode_tokens(data: bytes, completions: Mapping[Place, str]) -> dict[Place, CallTokens]:
    """{place: CallTokens} of the calls whose completion is given (`encode_tokens` inverted)."""
    raw = zlib.decompress(bytes(data))
    split = raw.index(b"\0")
    header = json.loads(raw[:split])
    offset = split + 1
    piece_bytes = []
    for entry in header:
        piece_bytes.append(raw[offset:offset + entry[2]])
        offset += entry[2]
    numbers = np.frombuffer(raw[offset:], dtype=np.uint8).reshape(2, -1).T.tobytes()  # the shuffle undone
    offset, out = 0, {}
    for k, (rollout, position, n, flags, extra, topk) in enumerate(header):
        arrays = {}
        for flag in (SAMPLER, TRAINER, ENTROPY):
            if flags & flag:
                arrays[flag] = numbers[offset:offset + 2 * n]
                offset += 2 * n
        if (rollout, position) not in completions:
            continue
        trainer = _values(np.frombuffer(arrays[TRAINER], "<u2"), -1e-3) if TRAINER in arrays else None
        sampler = None
        if flags & SAMPLER_DELTA:
            deltas = np.frombuffer(arrays[SAMPLER], "<i2").tolist()
            sampler = [None if d == UNKNOWN_I16 or t is None else round(t + d / 1000, 3) for d, t in zip(deltas, trainer, strict=True)]
        elif SAMPLER in arrays:
            sampler = _values(np.frombuffer(arrays[SAMPLER], "<u2"), -1e-3)
        out[(rollout, position)] = CallTokens(
            pieces=_pieces(piece_bytes[k], extra or {}, completions[(rollout, position)]),
            sampler=sampler, trainer=trainer,
            entropy=_values(np.frombuffer(arrays[ENTROPY], "<u2"), 1e-3) if ENTROPY in arrays else None,
            topk={int(pos): [(str(piece), float(p)) for piece, p in alternatives] for pos, alternatives in topk or ()})
    return out


def _pieces(lengths: bytes, extra: Mapping[str, str], completion: str) -> list[str]:
    pieces, cursor = [], 0
    for i, length in enumerate(lengths):
        if length == EXPLICIT:
            pieces.append(extra.get(str(i), ""))
        else:
            pieces.append(completion[cursor:cursor + length])
            cursor += length
    return pieces
