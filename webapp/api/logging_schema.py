"""The logging API's OpenAPI description (drf-spectacular): its request bodies, as
webapp/api/logging_input.py checks them, and its answers. Like webapp/api/schema.py, these serializers
describe and never validate (see logging_input.py's docstring for why); the schema fuzz
(tests/webapp/api/test_schema_fuzz.py) keeps the two in agreement."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from trainer.run import events
from webapp.api import logging_input
from webapp.api.schema import NO_NUL, ErrorSerializer, RunSerializer
from webapp.runs.ingest.external import FINAL_STATES


def _pattern(regex: str) -> RegexValidator:
    return RegexValidator(regex)


def no_nul_text(longest: int, **kwargs) -> serializers.Field:
    """A text field of at most `longest` characters, none a NUL, empty allowed, described by its own
    schema: a CharField's blank-plus-pattern becomes a oneOf that "" matches twice (so OpenAPI calls ""
    invalid), and without allow_blank it gains a minLength of 1."""
    schema = {"type": "string", "maxLength": longest, "pattern": NO_NUL}
    if kwargs.get("help_text"):
        schema["description"] = kwargs["help_text"]
    field = extend_schema_field(schema)(type(f"NoNulText{longest}", (serializers.JSONField,), {}))
    return field(required=False, **kwargs)  # never validates (logging_input.py does): the schema is all
MESSAGE = {"type": "object", "required": ["role", "content"],
           "properties": {"role": {"type": "string"}, "content": {"type": "string"}}}


@extend_schema_field({
    "oneOf": [{"type": "string", "maxLength": events.MAX_TEXT}, {"type": "array", "items": MESSAGE}],
    "description": f"The text, or chat messages [{{\"role\", \"content\"}}, ...] (at most {events.MAX_TEXT:,} "
                   "characters in all)."})
class TextOrMessagesField(serializers.JSONField):
    pass


def _numbers_schema(most: int, what: str, longest: int) -> dict:
    return {"type": "object", "maxProperties": most, "additionalProperties": {"type": "number", "nullable": True},
            "description": f"{what} name (1 to {longest} characters) -> a finite number, or null when unknown."}


@extend_schema_field(_numbers_schema(events.MAX_METRICS_PER_STEP, "Metric", events.MAX_METRIC_KEY))
class MetricsField(serializers.JSONField):
    pass


@extend_schema_field(_numbers_schema(events.MAX_REWARDS_PER_ROLLOUT, "Reward", events.MAX_REWARD_NAME))
class RewardsField(serializers.JSONField):
    pass


@extend_schema_field({"oneOf": [{"type": "string", "maxLength": events.MAX_EXAMPLE_ID, "nullable": True},
                                {"type": "integer"}],
                      "description": "Rollouts of one step (and module) sharing it form one group."})
class GroupField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": {},
                      "description": f"The trainer's own settings, any JSON object (at most "
                                     f"{events.MAX_CONFIG_BYTES // 1024} KiB, {logging_input.MAX_CONFIG_DEPTH} levels deep)."})
@extend_schema_field({"type": "object", "additionalProperties": True, "description": (
    "The trainer's settings as JSON (at most 64 KiB and 32 levels; finite numbers). A NUL character in a key or "
    "a string is stored as U+FFFD, the replacement character: no database stores a NUL.")})
class ConfigField(serializers.JSONField):
    pass


@extend_schema_field({
    "type": "array", "nullable": True, "maxItems": events.MAX_TOKENS,
    "items": {"type": "string", "maxLength": events.MAX_PIECE},
    "description": "The completion token by token: each sampled token's text, decoded on its own (special tokens "
                   f"included), at most {events.MAX_TOKENS:,} of {events.MAX_PIECE:,} characters at most."})
class TokensField(serializers.JSONField):
    pass


def _per_token_schema(what: str, **bound) -> dict:
    return {"type": "array", "nullable": True, "maxItems": events.MAX_TOKENS, "items": {"type": "number", **bound},
            "description": f"{what}, one finite number per token of `tokens` (which it needs). A bad array (another "
                           "length, a null, out of bounds) is left out and named in a 400; the rest of the step is "
                           "stored."}


@extend_schema_field(_per_token_schema("Each token's log-prob under the policy that sampled it (at most 0)",
                                       maximum=events.MAX_LOGPROB))
class LogprobsField(serializers.JSONField):
    pass


@extend_schema_field(_per_token_schema("The entropy (nats) of the distribution each token was sampled from", minimum=0))
class EntropiesField(serializers.JSONField):
    pass


class RolloutLogSerializer(serializers.Serializer):
    prompt = TextOrMessagesField()
    completion = TextOrMessagesField()
    rewards = RewardsField(required=False)
    reward = serializers.FloatField(required=False, allow_null=True,
                                    help_text="Default: the sum of the known rewards (null when none is known).")
    advantage = serializers.FloatField(required=False, allow_null=True)
    group = GroupField(required=False)
    example_id = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=events.MAX_EXAMPLE_ID,
                                       help_text="Default (also for an empty one): the group, else the rollout's index.")
    module = serializers.CharField(required=False, allow_null=True, min_length=1, max_length=events.MAX_MODULE,
                                   help_text="Default: 'completion'.")
    tokens = TokensField(required=False)
    logprobs = LogprobsField(required=False)
    entropies = EntropiesField(required=False)


class SpanLogSerializer(serializers.Serializer):
    lane = serializers.CharField(min_length=1, max_length=events.MAX_LANE, help_text=(
        "The process the bar belongs to (a lane of the run's timeline): sampler, trainer, adapter, or one of yours."))
    name = serializers.CharField(min_length=1, max_length=events.MAX_SPAN_NAME, help_text="What it did.")
    start = serializers.FloatField(help_text="Seconds since the epoch.")
    end = serializers.FloatField(help_text="Seconds since the epoch (the bar runs between start and end).")
    policy_version = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=events.MAX_STEP,
                                              help_text="On a generation: the updates its weights had had.")


class StepLogSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=events.MAX_STEP)
    metrics = MetricsField(required=False, help_text=(
        "Scalars of the step. Those not sent are derived from its rollouts under the trainer's keys: reward/mean, "
        "reward/<name>, zero_var_share, group_var/<module>, zero_var_share/<module>, similarity/<module>, and "
        "tokens/entropy/mean (tokens/entropy/mean/<module> for several modules) from the rollouts' entropies."))
    rollouts = serializers.ListField(child=RolloutLogSerializer(), required=False,
                                     max_length=events.MAX_ROLLOUTS_PER_STEP)
    spans = serializers.ListField(child=SpanLogSerializer(), required=False, max_length=events.MAX_SPANS_PER_STEP,
                                  help_text="The step's bars on the run's timeline.")


class StepsLogSerializer(serializers.Serializer):
    steps = serializers.ListField(child=StepLogSerializer(), min_length=1, max_length=events.MAX_STEPS_PER_POST,
                                  help_text="A step already stored is skipped; of a step number given twice in "
                                            "one post, the first is stored (as a retry).")


class StepsLoggedSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    stored = serializers.ListField(child=serializers.IntegerField(min_value=0), help_text="Steps stored now.")
    skipped = serializers.ListField(child=serializers.IntegerField(min_value=0), help_text="Steps stored before.")


class StepsPartlyStoredSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What was wrong, in words.")
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False, help_text=(
        "Only when the rest of the post was stored: each per-token array left out (steps[0].rollouts[3].logprobs) "
        "-> what is wrong with it."))
    run = serializers.IntegerField(required=False)
    stored = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False,
                                   help_text="With errors: the steps stored now (without the arrays named).")
    skipped = serializers.ListField(child=serializers.IntegerField(min_value=0), required=False,
                                    help_text="With errors: the steps stored before.")


class ExternalRunCreateSerializer(serializers.Serializer):
    client_id = serializers.CharField(max_length=64, validators=[_pattern(r"^[A-Za-z0-9_.-]{1,64}$")], help_text=(
        "The client's id for the run: a retried create with the same id answers the same run."))
    task = serializers.CharField(max_length=events.MAX_TASK, validators=[_pattern(r"^[-a-zA-Z0-9_]+$")], help_text=(
        "A task's name: an existing task (e.g. toy_format), or a new one for runs trained elsewhere."))
    name = no_nul_text(events.MAX_NAME_CHARS)
    config = ConfigField(required=False)
    tags = serializers.ListField(child=serializers.CharField(
        max_length=events.MAX_TAG_CHARS, validators=[_pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]), required=False,
        max_length=events.MAX_TAGS)
    notes = no_nul_text(events.MAX_NOTES_CHARS)
    origin = serializers.CharField(required=False, max_length=events.MAX_ORIGIN,
                                   validators=[_pattern(r"^(?!cohort$)[-a-zA-Z0-9_]+$")],
                                   help_text="The trainer that logs the run, e.g. trl (default: sdk).")
    total_steps = serializers.IntegerField(required=False, min_value=0, max_value=events.MAX_TOTAL_STEPS)
    project = serializers.CharField(required=False, allow_blank=True, max_length=logging_input.MAX_PROJECT, help_text=(
        "The project to log into, by name: one where you are a member or an admin (a viewer gets 403). Default: a "
        "scoped token's project, else your personal project."), validators=[_pattern(r"^[^\x00]*$")])


class ExternalRunSerializer(RunSerializer):
    url = serializers.URLField(help_text="The run's page.")


class RunFinishSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=list(FINAL_STATES))
    error = no_nul_text(events.MAX_ERROR, help_text="What went wrong, for a failed run.")


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


UNAUTHENTICATED = _error("No, a malformed, unknown or revoked token.")
TOO_LARGE = _error("The body is over the endpoint's size limit.")
# webapp/api/budget.py and webapp/overload.py: nothing was stored; both carry Retry-After (seconds).
TOO_MANY = _error("This token sent more requests than COHORT_LOGGING_RATE: ask again after Retry-After seconds.")
STEPS_REFUSED = OpenApiResponse(StepsPartlyStoredSerializer, description=(
    "A field the contract refuses, named (with the step and rollout index): nothing was stored. Or only some "
    "rollouts' per-token arrays (tokens, logprobs, entropies) were bad: those were left out, the rest of the post "
    "was stored, and the answer names each in `errors` beside `run`, `stored` and `skipped`."))
BUSY = _error("The server is busy (every upload slot, or the database, was taken): nothing was stored; ask again "
              "after Retry-After seconds.")
CREATE_RESPONSES = {
    200: OpenApiResponse(ExternalRunSerializer, description="The run this client_id created before."),
    201: OpenApiResponse(ExternalRunSerializer, description="The new run, running."),
    400: _error("A field the contract refuses (named), or the owner's active-run limit."),
    401: UNAUTHENTICATED,
    403: _error("A read-only token; a project where you are a viewer, or outside the token's project; or signed "
                "in by session without the CSRF token."),
    413: TOO_LARGE,
    429: TOO_MANY,
    503: BUSY,
}


def run_responses(ok, conflict: str, bad: OpenApiResponse | None = None) -> dict:
    """The answers of an endpoint that writes to one run: only its owner may."""
    return {
        200: ok,
        400: bad or _error("A field the contract refuses, named (with the step and rollout index)."),
        401: UNAUTHENTICATED,
        403: _error("Not the run's owner (its teammates read it but log to none), a viewer of its project, a "
                    "read-only token, or a session without CSRF."),
        404: _error("No such run, or not in a project you (or the token) read."),
        409: _error(conflict),
        413: TOO_LARGE,
        429: TOO_MANY,
        503: BUSY,
    }
