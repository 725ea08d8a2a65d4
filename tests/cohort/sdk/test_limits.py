"""The SDK checks a run's arguments and steps against the server's limits before it writes a line,
so a step it accepts is one the server takes; its copies of the limits must equal the server's
(cohort/ cannot import the web app)."""

from cohort.sdk import request, values
from webapp.api import logging_input as server
from webapp.runs.launch import forms


def test_the_sdks_limits_are_the_servers():
    assert (values.MAX_STEP, values.MAX_ROLLOUTS_PER_STEP) == (server.MAX_STEP, server.MAX_ROLLOUTS_PER_STEP)
    assert (values.MAX_METRICS, values.MAX_METRIC_NAME) == (server.MAX_METRICS_PER_STEP, server.MAX_METRIC_KEY)
    assert (values.MAX_REWARDS, values.MAX_REWARD_NAME) == (server.MAX_REWARDS_PER_ROLLOUT, server.MAX_REWARD_NAME)
    assert values.MAX_PER_STEP == server.MAX_REWARD_NAMES_PER_STEP == server.MAX_MODULES_PER_STEP
    assert (values.MAX_TEXT, values.MAX_ID, values.MAX_MODULE) == (server.MAX_TEXT, server.MAX_EXAMPLE_ID,
                                                                    server.MAX_MODULE)
    assert (request.MAX_TASK, request.MAX_NAME, request.MAX_NOTES, request.MAX_ORIGIN) == (
        server.MAX_TASK, server.MAX_NAME, server.MAX_NOTES, server.MAX_ORIGIN)
    assert (request.MAX_CONFIG_BYTES, request.MAX_TOTAL_STEPS) == (server.MAX_CONFIG_BYTES, server.MAX_TOTAL_STEPS)
    assert (request.MAX_TAGS, request.MAX_TAG_CHARS) == (forms.MAX_TAGS, forms.MAX_TAG_CHARS)
    assert request.CLIENT_ID.pattern == server.CLIENT_ID.pattern and request.SLUG.pattern == server.SLUG.pattern
    assert (values.MAX_TOKENS, values.MAX_PIECE, values.MAX_LOGPROB) == (server.MAX_TOKENS, server.MAX_PIECE,
                                                                          server.MAX_LOGPROB)
    assert values.TOKEN_ARRAYS == server.TOKEN_ARRAYS and set(values.TOKEN_ARRAYS) <= values.ROLLOUT_KEYS
