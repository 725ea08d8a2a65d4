"""The sweeps API's OpenAPI description (drf-spectacular), as webapp/api/sweep_views.py answers and
webapp/sweeps (spec_input.py, services.py) checks. Like schema.py, these serializers describe and
never serialize."""

from __future__ import annotations

from rest_framework import serializers

from trainer.run.events import INT32_MAX
from webapp.api.schema import RunCreateSerializer
from webapp.sweeps.models import Sweep, Trial
from webapp.sweeps.plan import MAX_PARALLEL, MAX_SEEDS, MAX_TRIALS
from webapp.sweeps.study import DEFAULT_OPTIONS

# The request's example (the docs show it; the schema fuzz sends it): examples/sweep_toy.toml as JSON.
EXAMPLE = {"task": "toy", "name": "lr x group size", "config": {"steps": 6, "strategy": "mmgrpo", "rollouts_per_example": 8},
           "sweep": {"space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "group_size": [4, 8]},
                     "method": "tpe", "seeds": 2, "n_trials": 8, "parallel": 2, "objective": "", "mode": "last",
                     "direction": "maximize", "pruner": "median", "sampler_seed": 0,
                     "options": {"startup_trials": 2}}}


class SweepSettingsSerializer(serializers.Serializer):
    space = serializers.DictField(child=serializers.JSONField(), help_text=(
        'RunConfig setting -> its values (`[4, 8]` or `{"values": [4, 8]}`) or a numeric range (`{"low": 1e-5, '
        '"high": 1e-3, "log": true}`). Every value must be one RunConfig accepts on the base settings, and '
        "every configuration within the launch limits; the seed has its own setting (`seeds`)."))
    method = serializers.ChoiceField(choices=Sweep.Method.choices, required=False, default=Sweep.Method.TPE)
    seeds = serializers.IntegerField(min_value=1, max_value=MAX_SEEDS, required=False, default=1,
                                     help_text="Runs per configuration, seeds from the config's seed up.")
    n_trials = serializers.IntegerField(min_value=1, max_value=MAX_TRIALS, required=False, allow_null=True,
                                        help_text="Configurations to try. Default (or null): a grid's size, else 10.")
    parallel = serializers.IntegerField(min_value=1, max_value=MAX_PARALLEL, required=False, default=1,
                                        help_text="Configurations training at once (each runs `seeds` runs).")
    objective = serializers.CharField(required=False, allow_blank=True, max_length=200, help_text=(
        "The step metric to optimize. Empty: eval/reward/mean when the runs evaluate, else reward/mean."))
    mode = serializers.ChoiceField(choices=Sweep.Mode.choices, required=False, default=Sweep.Mode.LAST)
    direction = serializers.ChoiceField(choices=Sweep.Direction.choices, required=False,
                                        default=Sweep.Direction.MAXIMIZE)
    pruner = serializers.ChoiceField(choices=Sweep.Pruner.choices, required=False, default=Sweep.Pruner.NONE)
    sampler_seed = serializers.IntegerField(min_value=0, max_value=INT32_MAX, required=False, default=0)
    options = serializers.DictField(child=serializers.IntegerField(min_value=0, max_value=INT32_MAX),
                                    required=False, help_text=(
        f"The sampler's and pruner's settings, of {', '.join(DEFAULT_OPTIONS)} (grid_points and reduction_factor "
        "at least 2); another name is refused."))


class SweepCreateSerializer(RunCreateSerializer):
    task = serializers.CharField(help_text=(
        "The task's name, as the launch form lists them (a task that holds only runs trained elsewhere: 400)."))
    sweep = SweepSettingsSerializer(help_text=(
        "What the sweep varies and how. The rest of the body is POST /api/runs/'s: the base settings every "
        "configuration starts from, checked as a run's."))


class TrialSerializer(serializers.Serializer):
    number = serializers.IntegerField(min_value=0, help_text="Optuna's trial number.")
    params = serializers.DictField(help_text="The swept settings of this configuration.")
    state = serializers.ChoiceField(choices=Trial.State.choices)
    value = serializers.FloatField(allow_null=True, help_text="The objective: the mean over its seeds' runs.")
    reason = serializers.CharField(allow_blank=True, help_text="Why it was pruned or failed.")
    runs = serializers.ListField(child=serializers.IntegerField(), help_text="Its runs' ids, one per seed.")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class SweepSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=Sweep.State.choices)
    url = serializers.URLField(help_text="The sweep's page.")
    task = serializers.CharField()
    owner = serializers.CharField()
    project = serializers.CharField()
    method = serializers.ChoiceField(choices=Sweep.Method.choices)
    seeds = serializers.IntegerField(min_value=1)
    n_trials = serializers.IntegerField(min_value=1)
    parallel = serializers.IntegerField(min_value=1)
    objective = serializers.CharField()
    mode = serializers.ChoiceField(choices=Sweep.Mode.choices)
    direction = serializers.ChoiceField(choices=Sweep.Direction.choices)
    pruner = serializers.ChoiceField(choices=Sweep.Pruner.choices)
    sampler_seed = serializers.IntegerField()
    options = serializers.DictField(child=serializers.IntegerField())
    space = serializers.DictField(help_text="The checked space, each entry as `{\"values\"}` or `{\"low\", \"high\", \"log\"}`.")
    config = serializers.DictField(help_text="The base settings (trainer.config.RunConfig as JSON).")
    waiting = serializers.CharField(allow_blank=True, help_text="Why no further trial is queued now (a launch limit).")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    trial_count = serializers.IntegerField(min_value=0, help_text="Trials started so far.")
    trials = TrialSerializer(many=True)
