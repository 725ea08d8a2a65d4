"""`{% across_runs run example_id as others %}`: the other runs of `run`'s task that this request
may read and that drew the example, for the history page's "Open this example in other runs" form
(webapp/runs/examples/across.py `runs_for_example`; one query)."""

from django import template

from webapp.runs.access import runs_readable
from webapp.runs.examples.across import runs_for_example

register = template.Library()


@register.simple_tag(takes_context=True)
def across_runs(context, run, example_id) -> list:
    return runs_for_example(runs_readable(context["request"]), run, str(example_id))
