"""`{{ text|for_reader:run }}`: the text as this page's reader may see it. Through an anonymous share
link (webapp/runs/access.py `RunAccess.anonymous`) it shows no path, worker, host or owner's name."""

from django import template

from webapp.runs.access import anonymized

register = template.Library()


@register.filter
def for_reader(text, run):
    access = getattr(run, "access", None)
    if access is None or not access.anonymous:
        return text
    return anonymized(text, run)
