"""ToolRL tool-calling rewards: format and correctness (GDPO Appendix C, after ToolRL, Qian et al. 2025).

The model answers in the ToolRL output format (GDPO Appendix B)::

    <think> reasoning </think>
    <tool_call>
    {"name": "Tool name", "parameters": {"Parameter name": "Parameter content"}}
    {"name": "...", "parameters": {...}}
    </tool_call>
    <response> final response </response>

with ``<think>`` always present and at least one of ``<tool_call>`` / ``<response>``.
Model output is untrusted: nothing here raises on it. Malformed output scores the lowest value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainer.rewards._assignment import max_weight_matching
from trainer.rewards.base import Reward, gold_value, prediction_text, prediction_value

__all__ = [
    "ToolRLCorrectness",
    "ToolRLFormat",
    "correctness",
    "format_ok",
    "json_equal",
    "parse_tool_calls",
]

_TAGS = ("think", "tool_call", "response")
_STRUCTURE = re.compile(
    r"\s*<think>(?P<think>.*?)</think>"
    r"\s*(?:<tool_call>(?P<tool_call>.*?)</tool_call>)?"
    r"\s*(?:<response>(?P<response>.*?)</response>)?\s*",
    re.DOTALL,
)
_DECODER = json.JSONDecoder()


def format_ok(text: Any) -> float:
    """GDPO Eq. 9: R_format = 1 if all required fields appear and are in the correct order, else 0.

    Required structure: ``<think>...</think>`` first, then ``<tool_call>...</tool_call>`` and/or
    ``<response>...</response>``, in that order, each tag at most once (think exactly once), each
    present block non-empty, and nothing but whitespace around and between the blocks. The JSON inside
    ``<tool_call>`` is not checked here (that is the correctness reward's job).

    Examples: ``"<think> t </think>\\n<response> hi </response>"`` -> 1.0;
    ``"<response> hi </response><think> t </think>"`` -> 0.0 (order); ``"<think> t </think>"`` -> 0.0
    (no tool call or response); ``"<think> t </think><tool_call>"`` -> 0.0 (truncated).
    """
    if not isinstance(text, str):
        return 0.0
    # Tag counts first: with every tag at most once, the lazy regex below runs in linear time even on
    # adversarial output full of repeated tags.
    counts = {tag: (text.count(f"<{tag}>"), text.count(f"</{tag}>")) for tag in _TAGS}
    if counts["think"] != (1, 1) or any(counts[tag] not in ((0, 0), (1, 1)) for tag in _TAGS):
        return 0.0
    match = _STRUCTURE.fullmatch(text)
    if match is None:
        return 0.0
    blocks = match.groupdict()
    if blocks["tool_call"] is None and blocks["response"] is None:
        return 0.0
    for tag in _TAGS:
        # A tag counted once but not captured sits outside its slot (e.g. a response before think).
        if (blocks[tag] is None) != (counts[tag] == (0, 0)):
            return 0.0
        if blocks[tag] is not None and not blocks[tag].strip():
            return 0.0
    return 1.0


def _as_call(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, Mapping):
        return None
    name, parameters = obj.get("name"), obj.get("parameters")
    if not isinstance(name, str) or not isinstance(parameters, Mapping):
        return None
    if not all(isinstance(key, str) for key in parameters):
        return None
    return {"name": name, "parameters": dict(parameters)}


def parse_tool_calls(text: Any) -> list[dict[str, Any]] | None:
    """Parse the calls inside ``<tool_call>...</tool_call>``: a list of ``{"name", "parameters"}``.

    Returns ``[]`` when the text has no tool-call tags at all (the model chose not to call a tool), and
    ``None`` when the tool-call part is malformed: not exactly one opening and one closing tag in that
    order, or content that is not a sequence of whitespace-separated JSON objects each with a string
    ``"name"`` and an object ``"parameters"`` (ToolRL's prompt asks for ``{}`` when there are none).
    One object per line is the documented format; objects spread over several lines also parse.
    Never raises.

    Examples: ``'<tool_call>\\n{"name": "f", "parameters": {"x": 1}}\\n</tool_call>'`` ->
    ``[{"name": "f", "parameters": {"x": 1}}]``; ``"<tool_call>{broken</tool_call>"`` -> ``None``;
    ``"<think> no tools </think>"`` -> ``[]``.
    """
    if not isinstance(text, str):
        return None
    opens, closes = text.count("<tool_call>"), text.count("</tool_call>")
    if opens == 0 and closes == 0:
        return []
    start, end = text.find("<tool_call>"), text.find("</tool_call>")
    if opens != 1 or closes != 1 or end < start:
        return None
    body = text[start + len("<tool_call>") : end]
    calls: list[dict[str, Any]] = []
    position = 0
    while True:
        while position < len(body) and body[position].isspace():
            position += 1
        if position == len(body):
            return calls
        try:
            obj, position = _DECODER.raw_decode(body, position)
        except (ValueError, RecursionError):
            return None
        call = _as_call(obj)
        if call is None:
            return None
        calls.append(call)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: numbers by value (``1 == 1.0``), but booleans are not numbers
    (``true != 1``), strings exactly (``"1" != 1``), arrays elementwise, objects key by key.

    This is the ``1[P_G[k] = P_P[k]]`` test of GDPO Appendix C; Python's ``==`` alone would equate
    ``True`` and ``1``. Too-deep nesting compares unequal rather than raising.
    """
    try:
        return _json_equal(a, b)
    except RecursionError:
        return False


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, Sequence) and isinstance(b, Sequence):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return False


def _jaccard(a: set, b: set) -> Fraction:
    # 0/0: two empty sets are identical, so a call with no parameters matched by one with none scores 1
    # (otherwise the gold answer itself could not reach S_max).
    union = a | b
    return Fraction(len(a & b), len(union)) if union else Fraction(1)


def _pair_score(gold: dict[str, Any], predicted: dict[str, Any]) -> Fraction:
    gold_params, pred_params = gold["parameters"], predicted["parameters"]
    r_param = _jaccard(set(gold_params), set(pred_params))
    r_value = sum(1 for k, v in gold_params.items() if k in pred_params and json_equal(v, pred_params[k]))
    return r_param + r_value


def _valid_calls(calls: Any) -> list[dict[str, Any]] | None:
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Sequence):
        return None
    valid = [_as_call(c) for c in calls]
    return None if any(c is None for c in valid) else valid


def correctness(predicted_calls: Any, gold_calls: Sequence[Mapping[str, Any]]) -> float:
    """GDPO Appendix C correctness reward R_correct in [-3, 3] of predicted calls P against gold calls G.

    Terms (each call is ``{"name": str, "parameters": {str: value}}``):

    - tool names: ``r_name = |N_G ∩ N_P| / |N_G ∪ N_P|`` over the *sets* of names (1 when both are empty);
    - parameter names, per gold call G_j and its paired predicted call P_j:
      ``r_param = Σ_{G_j} |keys(G_j) ∩ keys(P_j)| / |keys(G_j) ∪ keys(P_j)|`` (1 for two empty key sets,
      0 for an unpaired G_j), in [0, |G|];
    - parameter values: ``r_value = Σ_{G_j} Σ_{k ∈ keys(G_j)} 1[G_j[k] = P_j[k]]`` (``json_equal``; a key
      missing from P_j counts 0), in [0, Σ|keys(G_j)|];
    - ``r_match = r_name + r_param + r_value`` in [0, S_max] with ``S_max = 1 + |G| + Σ_{G_j} |keys(G_j)|``;
    - ``R_correct = 6 · R_max / S_max − 3``, where ``R_max`` is r_match under the pairing of P and G that
      maximizes it. A predicted call may only pair with a gold call of the same tool name, each call
      pairs at most once, so the order of either list does not matter.

    Arithmetic is exact (fractions), so reordered inputs give bit-identical floats and the extremes are
    exactly -3.0 and 3.0. Malformed predicted calls (``None``, a non-list, an element without a string
    ``name`` and an object ``parameters``) score -3.0; malformed *gold* calls raise ``ValueError``.

    Worked example: G = [f(a=1, b=2)], P = [f(a=1, c=5)]. r_name = 1; keys {a,b} vs {a,c}: r_param = 1/3;
    values: a matches, b missing: r_value = 1; S_max = 1 + 1 + 2 = 4; R_max = 7/3;
    R_correct = 6 · (7/3) / 4 − 3 = 0.5.
    """
    gold = _valid_calls(gold_calls)
    if gold is None:
        raise ValueError("gold_calls must be a list of {'name': str, 'parameters': {str: value}} objects")
    predicted = _valid_calls(predicted_calls)
    if predicted is None:
        return -3.0

    gold_names = {g["name"] for g in gold}
    pred_names = {p["name"] for p in predicted}
    r_match = _jaccard(gold_names, pred_names)
    # Pairing only within a tool name splits the matching into independent per-name problems.
    for name in gold_names & pred_names:
        gold_group = [g for g in gold if g["name"] == name]
        pred_group = [p for p in predicted if p["name"] == name]
        best, _ = max_weight_matching([[_pair_score(g, p) for p in pred_group] for g in gold_group])
        r_match += best
    s_max = 1 + len(gold) + sum(len(g["parameters"]) for g in gold)
    return float(Fraction(6) * r_match / s_max - 3)


def _gold_calls(value: Any) -> list[dict[str, Any]] | None:
    if isinstance(value, str):
        return parse_tool_calls(value)
    return _valid_calls(value)


@dataclass(frozen=True)
class ToolRLFormat(Reward):
    """``format_ok`` of the prediction text (GDPO Eq. 9); in {0, 1}. Needs no gold.

    Example: ``"<think> t </think>\\n<tool_call>\\n{...}\\n</tool_call>"`` -> 1.0, ``""`` -> 0.0.
    """

    name = "toolrl_format"
    value_range = (0.0, 1.0)

    prediction_field: str | None = None

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        return format_ok(prediction_text(prediction, self.prediction_field))


@dataclass(frozen=True)
class ToolRLCorrectness(Reward):
    """``correctness`` of the prediction's tool calls against the example's gold calls; in [-3, 3].

    The gold value under ``gold_field`` is a list of ``{"name", "parameters"}`` calls (the dataset's
    ``gt_tool_calls``) or a full gold output string (e.g. ``gold_field="answer"``), parsed with
    ``parse_tool_calls``; a missing or malformed gold gives ``None``. The prediction is model output
    text (parsed here; malformed -> -3.0) or an already parsed list of calls.

    Rows whose gold has no tool calls (response-only turns) are scored by the same formula: S_max = 1
    and R_correct is 3 when the model also calls nothing and -3 when it calls any tool. Set
    ``skip_without_gold_calls=True`` to return ``None`` for them instead (ToolRL's own code scores
    such rows 0, neither rewarding nor punishing).
    """

    name = "toolrl_correctness"
    value_range = (-3.0, 3.0)

    gold_field: str = "gt_tool_calls"
    prediction_field: str | None = None
    skip_without_gold_calls: bool = False

    def __call__(self, example: dict, prediction: Any, trajectory: Any = None) -> float | None:
        gold = _gold_calls(gold_value(example, self.gold_field))
        if gold is None or (self.skip_without_gold_calls and not gold):
            return None
        value = prediction_value(prediction, self.prediction_field)
        if isinstance(value, str):
            predicted = parse_tool_calls(value)
        elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
            predicted = value
        else:
            predicted = None
        return correctness(predicted, gold)
