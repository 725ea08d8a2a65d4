"""How a token reads on the pages (webapp/runs/inspector/token_pieces.py): whitespace drawn, byte tokens as
their bytes and never as U+FFFD, and the sampled token found among a fork's alternatives by id."""

import pytest

from trainer.run.token_bytes import byte_pieces, raw_token_bytes
from webapp.runs.ingest.tokens import Alternative, CallTokens, decode_tokens, encode_tokens
from webapp.runs.inspector.token_pieces import (
    HIGH_ENTROPY_NATS,
    UNKNOWN_BYTES,
    is_sampled,
    piece_html,
    piece_parts,
    piece_text,
)

EMOJI = "😀".encode()  # F0 9F 98 80


def label(*hexes: str) -> str:
    """⟨E2 80⟩ as the pages write it: a no-break space between the bytes."""
    return "⟨" + "\u00a0".join(hexes) + "⟩"


def test_a_byte_token_reads_as_its_bytes():
    assert piece_text("\ufffd", EMOJI[:2].hex()) == label("F0", "9F")
    assert piece_parts("\ufffd", EMOJI[2:].hex()) == [("bytes", label("98", "80"))]
    # Whole characters among the bytes stay text: a space, then the start of a character.
    assert piece_text(" \ufffd", "20e280") == "·" + label("E2", "80")
    assert piece_parts("a\ufffd", "61e2") == [("text", "a"), ("bytes", label("E2"))]
    assert piece_text("\ufffd", "80e2") == label("80", "E2")  # invalid bytes side by side make one label
    html = piece_html(" \ufffd", "20e280")
    assert html == ('<span class="ws">·</span><span class="bytes" title="bytes of a multi-byte character, '
                    f'split across tokens">{label("E2", "80")}</span>')


def test_a_byte_token_without_stored_bytes_never_reads_as_the_replacement_character():
    assert piece_text("\ufffd") == UNKNOWN_BYTES and piece_text(" \ufffd") == "·" + UNKNOWN_BYTES
    assert "\ufffd" not in piece_html("\ufffd\ufffd")
    assert piece_text(" Paris\n") == "·Paris⏎" and piece_html("<b>") == "&lt;b&gt;"


def test_bytes_round_trip_through_the_store():
    text = "Hi 😀"
    details = {"pieces": ["Hi", " ", "\ufffd", "\ufffd"], "entropy": [0.1, 0.2, 0.3, 1.5],
               "bytes": [[2, EMOJI[:2].hex()], [3, EMOJI[2:].hex()], [9, "00"], [1, "not hex"]],
               "topk": [[3, [["\ufffd", 0.5, 10, "9880"], ["\ufffd", 0.4, 11, "9881"], [" ok", 0.1, 12]], 10]]}
    tokens = decode_tokens(encode_tokens([((0, 0), text, details)]), {(0, 0): text})[(0, 0)]
    assert tokens.byte_pieces == {2: "f09f", 3: "9880"}  # past the end or not hex: dropped
    assert tokens.topk[3] == [Alternative("\ufffd", 0.5, 10, "9880"), Alternative("\ufffd", 0.4, 11, "9881"),
                              Alternative(" ok", 0.1, 12)]
    assert tokens.sampled_ids == {3: 10}
    assert [piece_text(p, tokens.byte_pieces.get(i)) for i, p in enumerate(tokens.pieces)] == [
        "Hi", "·", label("F0", "9F"), label("98", "80")]
    assert tokens.to_contract()["bytes"] == [[2, "f09f"], [3, "9880"]]
    assert tokens.to_contract()["topk"] == [[3, [["\ufffd", 0.5, 10, "9880"], ["\ufffd", 0.4, 11, "9881"],
                                                 [" ok", 0.1, 12]], 10]]


def test_details_without_ids_or_bytes_encode_as_before():
    details = {"pieces": ["a"], "entropy": [1.0], "topk": [[0, [["a", 0.6], ["b", 0.4]]]]}
    tokens = decode_tokens(encode_tokens([((0, 0), "a", details)]), {(0, 0): "a"})[(0, 0)]
    assert tokens.topk == {0: [("a", 0.6, None, None), ("b", 0.4, None, None)]}
    assert tokens.sampled_ids == {} and tokens.byte_pieces == {}
    assert tokens.to_contract()["topk"] == details["topk"] and "bytes" not in tokens.to_contract()


def fork(sampled_piece: str, alternatives, *, sampled_id=None, hexed=None) -> CallTokens:
    return CallTokens([sampled_piece], topk={0: alternatives}, sampled_ids={} if sampled_id is None else {0: sampled_id},
                      byte_pieces={} if hexed is None else {0: hexed})


def test_the_sampled_alternative_is_found_by_id_then_bytes_then_text():
    two_bytes = [Alternative("\ufffd", 0.98, 7, "e2"), Alternative("\ufffd", 0.01, 8, "f0")]
    tokens = fork("\ufffd", two_bytes, sampled_id=7, hexed="e2")
    assert [is_sampled(a, tokens, 0) for a in two_bytes] == [True, False]  # by id: one ✓, not two
    tokens = fork("\ufffd", [a._replace(id=None) for a in two_bytes], hexed="f0")
    assert [is_sampled(a, tokens, 0) for a in tokens.topk[0]] == [False, True]  # no ids: by bytes
    plain = [Alternative(" a", 0.6), Alternative(" b", 0.4)]
    assert [is_sampled(a, fork(" b", plain), 0) for a in plain] == [False, True]  # an external trainer's: by text
    legacy = [Alternative("\ufffd", 0.98), Alternative("\ufffd", 0.01)]
    assert [is_sampled(a, fork("\ufffd", legacy), 0) for a in legacy] == [False, False]  # `�` tells nothing


def test_the_high_entropy_threshold_is_a_fair_coin_between_two_tokens():
    assert HIGH_ENTROPY_NATS == pytest.approx(0.6931, abs=1e-4)


class ByteLevelTokenizer:
    """convert_ids_to_tokens of a byte-level BPE vocabulary (GPT-2's alphabet: Ġ a space, âĢ E2 80)."""

    vocab = {1: "ĠâĢ", 2: "Ķ", 3: "Ġok", 4: "ï¿½", 5: "<0xE2>", 6: "<|im_end|>"}

    def convert_ids_to_tokens(self, ids):
        return [self.vocab[i] for i in ids]


def test_the_trainer_finds_the_bytes_of_byte_tokens_only():
    assert raw_token_bytes("ĠâĢ") == b" \xe2\x80" and raw_token_bytes("<0xE2>") == b"\xe2"
    assert raw_token_bytes("▁Paris") is None  # a SentencePiece token: not the byte-level alphabet
    pieces = {1: " \ufffd", 2: "\ufffd", 3: " ok", 4: "\ufffd", 5: "\ufffd", 6: "<|im_end|>"}
    # U+FFFD as a whole token (EF BF BD) keeps its text; " ok" is not asked about.
    assert byte_pieces(ByteLevelTokenizer(), pieces) == {1: "20e280", 2: "94", 5: "e2"}
