"""The API's error bodies: DRF's `{"detail": message}` for everything, including a bad query
parameter (`BadParam`, 400) and a missing object (404)."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from webapp.runs.params import BadParam


def exception_handler(exc, context):
    if isinstance(exc, BadParam):
        exc = exceptions.ParseError(str(exc))
    return drf_exception_handler(exc, context)
