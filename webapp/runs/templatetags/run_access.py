"""`{{ text|for_reader:run }}`: the text as this page's reader may see it. Through an anonymous share
link (webapp/runs/access.py `RunAccess.anonymous`) it shows no path, worker, host or owner's name.
`run|has_adapter`: whether its adapter is there to download; `run|duration`: as the runs table says it."""

from django import template

from webapp.runs.access import anonymized
from webapp.runs.export.adapters import adapter_folder
from webapp.runs.selectors import run_elapsed
from webapp.runs.table.views import duration_text

register = template.Library()


@register.filter
def for_reader(text, run):
    access = getattr(run, "access", None)
    if access is None or not access.anonymous:
        return text
    return anonymized(text, run)


@register.filter
def has_adapter(run) -> bool:
    """Whether the run has a trained adapter to download: a succeeded run of Cohort's worker whose
    folder holds one (a run trained elsewhere never has one here)."""
    return adapter_folder(run) is not None


@register.filter
def duration(run) -> str:
    """The run's duration as its row in the runs table says it (`4m 09s`; `—` before it started)."""
    return duration_text(run_elapsed(run))
