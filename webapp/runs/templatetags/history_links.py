"""`{{ example_id|example_history_url:run.pk }}`: the link to an example's history page, for
templates whose views do not build it (the step page's example rows)."""

from django import template

from webapp.runs.inspector.grid_cells import example_history_url as _url

register = template.Library()


@register.filter
def example_history_url(example_id, run_id) -> str:
    return _url(int(run_id), str(example_id))
