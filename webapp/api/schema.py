"""The read API's OpenAPI description (drf-spectacular): the shape of every answer and the limits of
every query parameter, as `views.py` and `params.py` enforce them. The serializers here describe;
they never serialize (`bodies.py` builds the dicts, see its docstring), so a test checks that the
two agree (tests/webapp/api/test_schema_fuzz.py runs schemathesis against the live API)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from webapp.api import params
from webapp.runs.launch.check import MAX_TAG_CHARS
from webapp.runs.models import Group, Run
from webapp.runs.params import INT_PARAM_MAX, MAX_SERIES_KEY_LENGTH


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "webapp.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A personal token from /api/tokens/: `Authorization: Bearer <key>`."}


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What was wrong, in words.")


class RunSummarySerializer(serializers.Serializer):
    current_step = serializers.IntegerField(min_value=0)
    total_steps = serializers.IntegerField(min_value=0)
    best_reward = serializers.FloatField(allow_null=True)
    last_reward_mean = serializers.FloatField(allow_null=True)
    last_eval_reward_mean = serializers.FloatField(allow_null=True)
    attempt = serializers.IntegerField(min_value=0)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class RunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=Run.State.choices)
    task = serializers.CharField()
    program = serializers.CharField()
    owner = serializers.CharField()
    project = serializers.CharField(help_text="The project it belongs to: its members read it.")
    origin = serializers.CharField(help_text=(
        "Who trains it: 'cohort' (Cohort's worker) or the trainer that logs it through the API ('trl', 'sdk')."))
    config = serializers.DictField(help_text=(
        "The run's trainer.config.RunConfig, as JSON; for a run trained elsewhere, its trainer's settings."))
    partition = serializers.CharField(allow_blank=True, help_text=(
        "The Slurm partition it trains on as a batch job; empty: this server's workers."))
    summary = RunSummarySerializer()


class _PageSerializer(serializers.Serializer):
    count = serializers.IntegerField(min_value=0)
    offset = serializers.IntegerField(min_value=0)
    limit = serializers.IntegerField(min_value=1, max_value=params.PAGE_MAX)
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)


class RunPageSerializer(_PageSerializer):
    results = RunSerializer(many=True)


class SeriesSerializer(serializers.Serializer):
    x = serializers.ListField(child=serializers.IntegerField(), help_text="Steps.")
    y = serializers.ListField(child=serializers.FloatField(allow_null=True), help_text="Values; null is a gap.")
    total = serializers.IntegerField(min_value=0, help_text="Points stored in the range.")
    downsampled = serializers.BooleanField()


class MetricsSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    series = serializers.DictField(child=SeriesSerializer(), help_text="Metric key to its trace.")


class CallSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    position = serializers.IntegerField(min_value=0)
    module = serializers.CharField()
    invocation_index = serializers.IntegerField(min_value=0)
    completion = serializers.CharField(allow_null=True, allow_blank=True)
    parsed_ok = serializers.BooleanField()
    specific_reward = serializers.FloatField()
    propagated_reward = serializers.FloatField(allow_null=True)
    advantage = serializers.FloatField(allow_null=True)
    prompt = serializers.CharField(allow_null=True, allow_blank=True, required=False,
                                   help_text="Only with `prompts=1`.")
    messages = serializers.JSONField(allow_null=True, required=False, help_text="Only with `prompts=1`.")


class RolloutSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    attempt = serializers.IntegerField(min_value=0)
    step = serializers.IntegerField(min_value=0)
    index = serializers.IntegerField(min_value=0)
    example_id = serializers.CharField(allow_blank=True)
    parent = serializers.IntegerField(allow_null=True, help_text="The rollout this one was forked from (MHGPO).")
    teacher = serializers.CharField(allow_blank=True, help_text="Empty for the student program.")
    fork_point = serializers.CharField(allow_blank=True)
    total_reward = serializers.FloatField(allow_null=True)
    reward_components = serializers.DictField()
    failed = serializers.BooleanField()
    error = serializers.CharField(allow_blank=True)
    final_output = serializers.JSONField(allow_null=True)
    calls = CallSerializer(many=True)


class RolloutPageSerializer(_PageSerializer):
    results = RolloutSerializer(many=True)


class MemberSerializer(serializers.Serializer):
    position = serializers.IntegerField(min_value=0)
    call = serializers.IntegerField()
    rollout_index = serializers.IntegerField(min_value=0)
    reward = serializers.FloatField(allow_null=True)
    reward_components = serializers.DictField()
    advantage = serializers.FloatField(allow_null=True)
    component_advantages = serializers.JSONField(allow_null=True)
    padded = serializers.BooleanField()
    duplicated = serializers.BooleanField()


class GroupSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    attempt = serializers.IntegerField(min_value=0)
    step = serializers.IntegerField(min_value=0)
    index = serializers.IntegerField(min_value=0)
    module = serializers.CharField()
    invocation_index = serializers.IntegerField(min_value=0)
    kind = serializers.ChoiceField(choices=Group.Kind.choices)
    example_id = serializers.CharField(allow_blank=True)
    size = serializers.IntegerField(min_value=0)
    reward_mean = serializers.FloatField(allow_null=True)
    reward_var = serializers.FloatField(allow_null=True)
    similarity = serializers.FloatField(allow_null=True)
    distinct_advantages = serializers.IntegerField(allow_null=True)
    distinct_reward_vectors = serializers.IntegerField(allow_null=True)
    members = MemberSerializer(many=True)


class GroupPageSerializer(_PageSerializer):
    results = GroupSerializer(many=True)


class RunCreateSerializer(serializers.Serializer):
    task = serializers.CharField(help_text=(
        "The task's name (or id), as the launch form lists them. A task that exists only for runs trained "
        "elsewhere (made by the logging API, on no registered program) has nothing to train: 400."))
    project = serializers.CharField(required=False, max_length=150, help_text=(
        "The project to launch into, by name: one where you are a member or an admin (a viewer gets 403). "
        "Default: a scoped token's project, else your personal project."))
    program = serializers.CharField(required=False, help_text="Default: the task's program.")
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)
    tags = serializers.ListField(child=serializers.CharField(max_length=MAX_TAG_CHARS), required=False)
    notes = serializers.CharField(required=False, allow_blank=True)
    preset = serializers.CharField(required=False, allow_null=True, help_text="A launch form preset's name.")
    config = serializers.DictField(required=False, help_text=(
        "Run settings (launch form field names) over the page's defaults: the program's suggestions, the "
        "task's rewards, the preset."))
    program_state = serializers.DictField(required=False, allow_null=True, help_text=(
        "A DSPy program's saved state (what its save() writes), trained from: its optimized prompts."))
    partition = serializers.CharField(required=False, allow_blank=True, max_length=100, help_text=(
        "Where it trains: a Slurm partition the server offers (COHORT_SLURM_PARTITIONS), as a batch job; "
        "empty or absent: this server's workers."))
    time_limit = serializers.IntegerField(required=False, allow_null=True, min_value=1, help_text=(
        "The Slurm job's time limit in minutes (default: the server's); only with a partition."))


class LaunchErrorSerializer(ErrorSerializer):
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False,
                                   help_text="Field (a body key or a run setting) -> what is wrong with it.")


def create_responses(ok) -> dict:
    """The answers of run creation: 201 with the queued run, 400 with the form's errors by field."""
    return {
        201: ok,
        400: OpenApiResponse(LaunchErrorSerializer, description=(
            "The body, a setting, a limit or the model allow-list refused it, or its task exists only for runs "
            "trained elsewhere (nothing to train it with); nothing was queued.")),
        401: OpenApiResponse(ErrorSerializer, description="No, a malformed, unknown or revoked token."),
        403: OpenApiResponse(ErrorSerializer, description=(
            "A read-only token; a project where you are a viewer, or outside the token's project; or signed in "
            "by session without the CSRF token.")),
        413: OpenApiResponse(ErrorSerializer, description="The body is over DATA_UPLOAD_MAX_MEMORY_SIZE."),
    }


def responses(ok, *, not_found: bool = True) -> dict:
    """An endpoint's answers: `ok` on 200, and the errors every endpoint may give."""
    answers = {
        200: ok,
        400: OpenApiResponse(ErrorSerializer, description="A query parameter that cannot be used."),
        401: OpenApiResponse(ErrorSerializer, description="No, a malformed, unknown or revoked token."),
    }
    if not_found:
        answers[404] = OpenApiResponse(ErrorSerializer, description="No such run or step, or not yours.")
    return answers


def _int(name: str, description: str, *, minimum: int = 0, maximum: int | None = None) -> OpenApiParameter:
    schema = {"type": "integer", "minimum": minimum, "maximum": INT_PARAM_MAX if maximum is None else maximum}
    return OpenApiParameter(name, schema, description=description)


# Text that holds no NUL: PostgreSQL cannot store one, and webapp/nul_guard.py refuses it everywhere.
NO_NUL = r"^[^\x00]*$"


def _text(name: str, description: str, *, enum=None) -> OpenApiParameter:
    schema = {"type": "string", "maxLength": params.MAX_TEXT, "pattern": NO_NUL}
    if enum is not None:
        schema["enum"] = ["", *enum]  # empty: no filter, as absent
    return OpenApiParameter(name, schema, description=description)


def _repeated(name: str, description: str, item: dict) -> OpenApiParameter:
    schema = {"type": "array", "items": item, "maxItems": params.MAX_CONFIG_FILTERS}
    return OpenApiParameter(name, schema, description=description, style="form", explode=True)


# `params.config_filter`'s rule: dotted keys of letters, digits, '_' and '-' (never '__'), then '='; no
# NUL anywhere (`[^\x00]*`, not `.*`: a dot stops at a newline, so "a=\n\x00" passed as schema-valid and
# the fuzz, on a rare draw, called the 400 it got a rejection of valid data).
CONFIG_FILTER = r"^(?![^=]*__)(?![^\x00]*\x00)[A-Za-z0-9_-]{1,100}(\.[A-Za-z0-9_-]{1,100})*="
PAGE = [
    _int("limit", f"Rows per page, 1 to {params.PAGE_MAX} (default {params.PAGE_DEFAULT}).",
         minimum=1, maximum=params.PAGE_MAX),
    _int("offset", "Rows to skip (default 0)."),
]
ATTEMPT = _int("attempt", "Which attempt of a resumed run (default: the newest that stored the step).", minimum=1)
RUN_FILTERS = [
    _text("state", "Only runs in this state.", enum=Run.State.values),
    _text("task", "The task's name."),
    _text("program", "The program's name."),
    _text("owner", "The owner's username."),
    _text("project", "The project's name (any case): only its runs. Without it, every project you read (a token "
                     "scoped to a project reads that one only)."),
    _text("q", "The run's name contains this (case-insensitive)."),
    _repeated("tag", "Carries this tag (repeat for all of several).",
              {"type": "string", "maxLength": MAX_TAG_CHARS, "pattern": NO_NUL}),
    _repeated("config", "`key=value` on the run's config (`a.b=value` for nested keys; the value is read as "
              "JSON when it is JSON). Repeat for all of several.", {"type": "string", "pattern": CONFIG_FILTER}),
]
METRICS = [
    OpenApiParameter("series", {"type": "string", "pattern": NO_NUL}, description=(
        f"Comma-separated metric keys (at most {params.MAX_SERIES}, of at most {MAX_SERIES_KEY_LENGTH} "
        "characters each); every series when absent.")),
    _int("max_points", "At most this many points per series (MinMaxLTTB, as the charts); every point when "
         "absent.", minimum=params.MAX_POINTS_LOW, maximum=params.MAX_POINTS_HIGH),
    _int("from_step", "First step (inclusive)."),
    _int("to_step", "Last step (inclusive); before `from_step`, the window holds no step."),
]
PROMPTS = OpenApiParameter("prompts", {"type": "string", "enum": list(params.FLAG_VALUES)},
                           description="1 to include each call's prompt and messages (large).")
MODULE = OpenApiParameter("module", {"type": "string", "maxLength": 100, "pattern": NO_NUL}, description="Only this module's groups.")
