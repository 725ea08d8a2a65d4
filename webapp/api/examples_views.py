"""`GET /api/examples/diff/?a=&b=`: where two runs (or two seed groups) of one task part, the table of
the part-ways page (webapp/runs/examples/partways.py says what is counted) as JSON, paged like the
other lists (`limit`, `offset`), with the counts per category and the notes on what is missing.
`cohort.client.Client.examples_diff` follows the pages into one DataFrame."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.response import Response

from webapp.api import params, schema
from webapp.api.scope import api_runs
from webapp.runs.examples import partways as pw
from webapp.runs.examples.common import ExamplesRefused, parse_solved

# --- the OpenAPI description (drf-spectacular; these serializers describe, `partways.row_dict` builds) ---


class SideRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    solved = serializers.FloatField(help_text="The total reward at which a visit counts as right in this run.")


def _side_fields(side: str) -> dict:
    """The columns of one side, `a_*` or `b_*` (None where the side never drew the example)."""
    number, count = serializers.FloatField, serializers.IntegerField
    return {f"{side}_{name}": field for name, field in {
        "runs": count(min_value=0, help_text="The side's runs that drew the example."),
        "visits": count(min_value=0, help_text="Their visits (steps that drew it), summed."),
        "early": number(allow_null=True, help_text="Share of right visits in the first third of its visits."),
        "late": number(allow_null=True, help_text="Share of right visits in the last third."),
        "gain": number(allow_null=True, help_text="late - early."),
        "early_mean": number(allow_null=True, help_text="Mean reward in the first third."),
        "late_mean": number(allow_null=True, help_text="Mean reward in the last third."),
        "first_right": count(allow_null=True, help_text="The first step right (the earliest of the side's runs)."),
        "right_at_end": number(allow_null=True, help_text="Share of the side's runs right at their last visit."),
        "first_step": count(allow_null=True), "last_step": count(allow_null=True),
    }.items()}


PartwaysRowSerializer = serializers.SerializerMetaclass("PartwaysRowSerializer", (serializers.Serializer,), {
    "__module__": __name__,
    "example_id": serializers.CharField(allow_blank=True),
    "category": serializers.ChoiceField(choices=list(pw.CATEGORIES.items())),
    "late_gap": serializers.FloatField(allow_null=True, help_text="|a_late - b_late|; null when a side never drew it."),
    "gain_gap": serializers.FloatField(allow_null=True, help_text="|a_gain - b_gain|."),
    **_side_fields("a"), **_side_fields("b"),
})


class PartwaysPageSerializer(schema._PageSerializer):
    a = SideRunSerializer(many=True)
    b = SideRunSerializer(many=True)
    counts = serializers.DictField(child=serializers.IntegerField(min_value=0), help_text=(
        "Examples per category (every category, 0 when none), over the whole table (not this page, nor `kind`)."))
    notes = serializers.ListField(child=serializers.CharField(), help_text=(
        "What the table cannot count: runs without rollouts, steps whose rollouts retention dropped."))
    results = PartwaysRowSerializer(many=True)


SIDE_SCHEMA = {"type": "string", "pattern": pw.SIDE_PATTERN}
PARAMETERS = [
    OpenApiParameter("a", SIDE_SCHEMA, required=True, description=(
        f"Side A: a run id, or up to {pw.MAX_RUNS_PER_SIDE} comma-separated (a seed group, averaged).")),
    OpenApiParameter("b", SIDE_SCHEMA, required=True, description="Side B, as `a`; no run on both sides."),
    OpenApiParameter("solved", {"type": "number"}, description=(
        "The total reward at which a visit counts as right (default: each run's sum of its rewards' weights).")),
    OpenApiParameter("kind", {"type": "string", "enum": ["", *pw.CATEGORIES]}, description=(
        "Only this category's rows (empty: every row).")),
    *schema.PAGE,
]


@extend_schema(operation_id="examples_diff", parameters=PARAMETERS,
               responses={**schema.responses(PartwaysPageSerializer), 400: OpenApiResponse(
                   schema.ErrorSerializer, description=(
                       "A query parameter that cannot be used, or runs that cannot be compared: of different "
                       "tasks, or one run on both sides."))})
@api_view(["GET"])
def examples_diff(request):
    """`GET /api/examples/diff/?a=<id>[,<id>...]&b=<id>[,<id>...]&solved=&kind=&limit=&offset=`: the
    examples ranked by how differently the two sides did on them (learned by one and not the other,
    lost, solved by both, unsolved by both), with the counts per category."""
    a_ids = pw.parse_side(request.GET.get("a"), "a")
    b_ids = pw.parse_side(request.GET.get("b"), "b")
    solved = parse_solved(request.GET.get("solved"), blank_is_absent=False)
    kind = pw.parse_kind(request.GET.get("kind"))
    offset, limit = params.page_params(request)
    by_id = {r.pk: r for r in api_runs(request).filter(pk__in=[*a_ids, *b_ids])}
    missing = [pk for pk in [*a_ids, *b_ids] if pk not in by_id]
    if missing:
        raise NotFound(f"No run {missing[0]}, or not yours.")
    a, b = [by_id[pk] for pk in a_ids], [by_id[pk] for pk in b_ids]
    try:
        table = pw.partways(a, b, solved=solved)
    except ExamplesRefused as exc:
        raise ParseError(str(exc)) from None
    rows = table.of_category(kind)
    page = params.paginated(request, [pw.row_dict(r) for r in rows[offset:offset + limit]], count=len(rows),
                            offset=offset, limit=limit)
    sides = {name: [{"id": r.pk, "name": r.name, "solved": table.solved[r.pk]} for r in side]
             for name, side in (("a", a), ("b", b))}
    return Response({**page, **sides, "counts": table.counts, "notes": table.notes})
