"""Reading a JSON column at a key path a user typed (`config=lora.rank=8`, `series=reward/mean`).

Django's `config__a__b` reads each `__` part as a key unless it names a lookup (`gt`, `regex`,
`isnull`), and its key transform reads any part that looks like an integer as a list index, which
SQLite rejects for a negative one (`$[-9]` is a JSON path error). Both turned a search into a 500.
Here the path is built from explicit steps, so no text a user types can become a lookup, and each
step is an object key unless the caller says it may index a list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from django.db.models import F, FloatField, Func
from django.db.models.fields.json import KeyTransform

LIST_INDEX = re.compile(r"0|[1-9][0-9]{0,8}")  # a whole number as written: `01` and `-1` are keys


class JsonStep(KeyTransform):
    """One step into a JSON value: an object key, or a list index where `index` is true. Lookups on it
    (`exact` and the rest) are Django's key-transform lookups, so values compare as JSON."""

    def __init__(self, key: str, lhs, *, index: bool = False):
        super().__init__(key, lhs)
        self.index = index

    def _steps(self, compiler):
        steps = [self]
        previous = self.lhs
        while isinstance(previous, JsonStep):
            steps.insert(0, previous)
            previous = previous.lhs
        if isinstance(previous, KeyTransform):
            raise TypeError("a JsonStep path must start at a JSON column, not at Django's own key transform")
        column_sql, params = compiler.compile(previous)
        return column_sql, list(params), steps

    def as_sqlite(self, compiler, connection):
        column_sql, params, steps = self._steps(compiler)
        path = "$" + "".join(f"[{int(s.key_name)}]" if s.index else "." + json.dumps(s.key_name) for s in steps)
        types = ",".join(repr(t) for t in connection.ops.jsonfield_datatype_values)
        # As Django's own key transform: JSON scalars that SQLite would turn into SQL values stay JSON.
        sql = (f"(CASE WHEN JSON_TYPE({column_sql}, %s) IN ({types}) "
               f"THEN JSON_TYPE({column_sql}, %s) ELSE JSON_EXTRACT({column_sql}, %s) END)")
        return sql, (*params, path, *params, path, *params, path)

    def as_postgresql(self, compiler, connection):
        column_sql, params, steps = self._steps(compiler)
        # One `->` a step: with an integer it indexes only a list, with text it reads only an object's
        # key (`#>` would read `-9` as a list index from the end).
        sql = column_sql
        for step in steps:
            sql = f"({sql} -> %s)"
            params.append(int(step.key_name) if step.index else step.key_name)
        return sql, tuple(params)

    def as_sql(self, compiler, connection):
        raise NotImplementedError(f"JsonStep supports PostgreSQL and SQLite, not {connection.vendor}")


def json_path(column: str, steps: Sequence[str], *, list_indexes: bool = False) -> JsonStep:
    """The value at `steps` inside the JSON column `column`. With `list_indexes`, a step written as a
    whole number (`rewards.0.name`) indexes a list; every other step is an object key."""
    if not steps:
        raise ValueError("a JSON path needs at least one step")
    expression = F(column)
    for step in steps:
        expression = JsonStep(step, expression, index=list_indexes and bool(LIST_INDEX.fullmatch(step)))
    return expression


def json_key(column: str, key: str) -> JsonStep:
    """The value of the object key `key` (any text, `-1` included) in the JSON column `column`."""
    return json_path(column, [key])


class JsonNumber(Func):
    """The number at the object key `key` of the JSON column `column`, as a float, read in the database:
    for reading one metric of many StepMetric rows, where a JsonStep gives JSON text that Django
    decodes row by row. For columns whose values are numbers or null, as StepMetric.metrics (ingest
    stores nothing else): PostgreSQL gives NULL for any other JSON value; SQLite reads the value as
    it is, with one JSON_EXTRACT (checking its JSON type as well parses the document twice, which
    doubled the read of a sweep's 60,000 rows), so text there would come back as text, true as 1."""

    output_field = FloatField()

    def __init__(self, column: str, key: str):
        super().__init__(F(column))
        self.key = key

    def as_sqlite(self, compiler, connection):
        column_sql, params = compiler.compile(self.get_source_expressions()[0])
        return f"JSON_EXTRACT({column_sql}, %s)", (*params, "$." + json.dumps(self.key))

    def as_postgresql(self, compiler, connection):
        column_sql, params = compiler.compile(self.get_source_expressions()[0])
        sql = (f"(CASE WHEN jsonb_typeof({column_sql} -> %s) = 'number' "
               f"THEN ({column_sql} ->> %s)::double precision END)")
        return sql, (*params, self.key, *params, self.key)

    def as_sql(self, compiler, connection, **extra):
        raise NotImplementedError(f"JsonNumber supports PostgreSQL and SQLite, not {connection.vendor}")
