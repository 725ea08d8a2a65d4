"""Serves Plotly.js from the installed `plotly` package as `static/vendor/plotly.min.js`.

The pages never load Plotly from a CDN: a self-hosted dashboard must work offline, and the
version then always matches the Python package that is pinned in pyproject.toml.
"""

from django.conf import settings
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


class PlotlyJsFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(settings.PLOTLY_JS_PATH.parent))
        self.storage.prefix = "vendor"

    def check(self, **kwargs):
        from django.core.checks import Error

        if not settings.PLOTLY_JS_PATH.exists():
            return [Error(f"plotly.min.js not found at {settings.PLOTLY_JS_PATH}", id="cohort.E001")]
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != PLOTLY_STATIC_PATH:
            return [] if find_all else None
        found = str(settings.PLOTLY_JS_PATH)
        return [found] if find_all else found

    def list(self, ignore_patterns):
        yield settings.PLOTLY_JS_PATH.name, self.storage
