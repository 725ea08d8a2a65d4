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
to 0.004). The top-k alternatives, kept at a step's forks only, stay JSON in the header, with their
token ids and the sampled token's id there where the trainer sent them (the forks table marks the
sampled one by id: byte tokens that decode alike are told apart), and so do the bytes of the tokens
that are part of a multi-byte character (their text alone is a replacement character, U+FFFD).

Decoding needs each call's completion (`decode_tokens(blob, completions)`), which its texts hold.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from trainer.run.events import finite_or_none

Place = tuple[int, int]  # (rollout index within the step, position of the call in its rollout)
EXPLICIT = 255  # a piece length byte: the piece is in the header, not in the text


class Alternative(NamedTuple):
    """One of the top-k tokens kept at a fork: its text, probability, and, where the trainer sent
    them, its token id and (a token that is part of a multi-byte character) its bytes in hex."""

    piece: str
    prob: float
    id: int | None = None
    hex: str | None = None

    def to_json(self) -> list:
        """The data contract's [piece, prob(, id(, hex))]."""
        out: list = [self.piece, self.prob]
        if self.id is not None or self.hex is not None:
            out.append(self.id)
        if self.hex is not None:
            out.append(self.hex)
        return out


@dataclass
class CallTokens:
    """One call's completion token by token. Arrays have one value per piece; None where unknown.
    `sampled_ids`: the sampled token's id at each fork, where sent; `byte_pieces`: the bytes (hex) of
    each sampled token that is part of a multi-byte character (its piece reads U+FFFD)."""

    pieces: list[str]
    sampler: list[float | None] | None = None
    trainer: list[float | None] | None = None
    entropy: list[float | None] | None = None
    topk: dict[int, list[Alternative]] = field(default_factory=dict)
    sampled_ids: dict[int, int] = field(default_factory=dict)
    byte_pieces: dict[int, str] = field(default_factory=dict)

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

    def to_contract(self) -> dict[str, Any]:
        """The details as the trainer sent them (trainer/run/token_details.py), for the export."""
        out: dict[str, Any] = {"pieces": self.pieces, "sampler": self.sampler, "trainer": self.trainer,
                               "entropy": self.entropy, "topk": []}
        for pos, alternatives in self.topk.items():
            entry: list = [pos, [a.to_json() for a in alternatives]]
            if pos in self.sampled_ids:
                entry.append(self.sampled_ids[pos])
            out["topk"].append(entry)
        if self.byte_pieces:
            out["bytes"] = [[pos, value] for pos, value in self.byte_pieces.items()]
        return out


def hex_bytes(value: Any) -> str | None:
    """`value` as lower-case hex digits of whole bytes ('e280'), or None when it is not that."""
    if not isinstance(value, str) or not value or len(value) % 2 or len(value) > 64:
        return None
    try:
        return bytes.fromhex(value).hex()
    except ValueError:
        return None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _alternative(entry: Sequence[Any]) -> list:
    """A sent alternative [piece, prob(, id(, hex))] as stored: its id and hex kept where valid."""
    out: list = [str(entry[0]), round(float(entry[1]), 4)]
    token_id = _whole(entry[2]) if len(entry) > 2 else None
    hexed = hex_bytes(entry[3]) if len(entry) > 3 else None
    if token_id is not None or hexed is not None:
        out.append(token_id)
    if hexed is not None:
        out.append(hexed)
    return out


def _fork(pos: int, entry: Sequence[Any]) -> list:
    """A sent fork [pos, alternatives(, sampled id)] as stored."""
    out: list = [pos, [_alternative(a) for a in entry[1]]]
    sampled = _whole(entry[2]) if len(entry) > 2 else None
    if sampled is not None:
        out.append(sampled)
    return out


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
        v = finite_or_none(v)
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
        topk = [_fork(int(entry[0]), entry) for entry in details.get("topk") or () if 0 <= int(entry[0]) < n]
        byte_pieces = {str(int(pos)): hexed for pos, value in details.get("bytes") or ()
                       if 0 <= int(pos) < n and (hexed := hex_bytes(value)) is not None}
        # The seventh field only where a piece has bytes: details without any encode as before.
        header.append([rollout, position, n, flags, extra or 0, topk or 0] + ([byte_pieces] if byte_pieces else []))
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
    for k, (rollout, position, n, flags, extra, topk, *more) in enumerate(header):
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
            topk={int(fork[0]): [Alternative(str(a[0]), float(a[1]), *a[2:4]) for a in fork[1]] for fork in topk or ()},
            sampled_ids={int(fork[0]): int(fork[2]) for fork in topk or () if len(fork) > 2},
            byte_pieces={int(pos): value for pos, value in (more[0] if more else {}).items()})
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
