"""The API's JSON bodies, bounded: over the limit is a 413 in the API's error shape (`{"detail"}`).

DRF's JSONParser is handed `request.body`, which Django holds to DATA_UPLOAD_MAX_MEMORY_SIZE by raising
RequestDataTooBig: Django's HTML 400 page, not the API's JSON, and one limit for every endpoint. This
parser is no JSONParser subclass, so DRF hands it the request's stream instead, and it bounds its own
reading: DATA_UPLOAD_MAX_MEMORY_SIZE by default (the API's default parser), or the `max_bytes` of a
subclass for an endpoint that takes more (`json_parser(max_bytes)`: the logging API's steps, many
rollouts a post). The declared Content-Length is refused before a byte is read; the read itself stops
one byte past the limit, whatever was declared. The ASGI guard (webapp/body_limit.py) still stops a
body larger than any upload before Django sees it.

`json_parser(max_bytes, non_finite=True)` also reads the literals NaN, Infinity and -Infinity (which
Python's own `json.dumps` writes) as floats, for an endpoint whose checks refuse a non-finite number
by its field's name (the logging API's steps: webapp/api/logging_input.py), where a parse error could
name nothing.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import exceptions, renderers
from rest_framework.parsers import BaseParser
from rest_framework.settings import api_settings
from rest_framework.utils import json


class RequestTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class BoundedJSONParser(BaseParser):
    """JSON as DRF's JSONParser reads it (NaN and Infinity refused), with a size limit: `max_bytes`,
    or DATA_UPLOAD_MAX_MEMORY_SIZE when None. JSON nested too deep for Python's reader is a 400 like
    any other malformed JSON (DRF's lets the RecursionError through: a 500)."""

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer
    strict = api_settings.STRICT_JSON
    max_bytes: int | None = None
    non_finite = False  # read NaN and +-Infinity as floats (the endpoint refuses them by name)

    def limit(self) -> int | None:
        return self.max_bytes if self.max_bytes is not None else settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = self.limit()
        if limit is None:
            body = stream.read()
        else:
            meta = getattr(parser_context.get("request"), "META", {})
            try:
                declared = int(meta.get("CONTENT_LENGTH") or 0)
            except (TypeError, ValueError):
                declared = 0
            if declared > limit:
                raise RequestTooLarge(_too_large(limit, self.max_bytes is None))
            body = stream.read(limit + 1)
            if len(body) > limit:
                raise RequestTooLarge(_too_large(limit, self.max_bytes is None))
        try:
            text = body.decode(parser_context.get("encoding", settings.DEFAULT_CHARSET))
            strict = self.strict and not self.non_finite
            return json.loads(text, parse_constant=json.strict_constant if strict else None)
        except (ValueError, RecursionError) as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


def _too_large(limit: int, django_limit: bool) -> str:
    size = f"{limit / (1024 * 1024):g} MiB" if limit >= 1024 * 1024 else f"{limit:,} bytes"
    where = " (DATA_UPLOAD_MAX_MEMORY_SIZE)" if django_limit else ""
    return f"The request body is over the {size} this endpoint takes{where}; send less at a time."


def json_parser(max_bytes: int, *, non_finite: bool = False) -> type[BoundedJSONParser]:
    """A bounded JSON parser class with its own limit, for an endpoint's `@parser_classes`; with
    `non_finite`, NaN and Infinity read as floats, for checks that refuse them by name."""
    name = f"JSONParserUpTo{max_bytes}" + ("NonFinite" if non_finite else "")
    return type(name, (BoundedJSONParser,), {"max_bytes": max_bytes, "non_finite": non_finite})
