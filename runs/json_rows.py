"""Model instances from rows a statement returned as JSON (`row_to_json`, `json_agg`).

The episode's hot path reads a run's children in one statement (runs.episode_loads): each child table comes back
as one JSON column, and this turns its objects into the model instances the rest of the runtime works with, as if
the ORM had read them (`from_db`: saving one updates its row).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from decimal import Decimal

from django.db import models
from django.utils.dateparse import parse_date, parse_datetime

from runs import model_rows


def instances(model: type[models.Model], rows: list[dict] | None) -> list:
    return [instance(model, row) for row in rows or []]


def instance(model: type[models.Model], row: dict):
    names, columns = _layout(model)
    return model_rows.from_db(model, "default", names, [row.get(column) if read is None else read(row.get(column))
                                                         for column, read in columns])


@functools.cache
def _layout(model: type[models.Model]) -> tuple[list[str], tuple[tuple[str, Callable | None], ...]]:
    """The model's attnames, and per concrete field its column and how its JSON value is read (None: as is)."""
    fields = model._meta.concrete_fields
    return [field.attname for field in fields], tuple((field.column, _reader(field)) for field in fields)


def _reader(field: models.Field) -> Callable | None:
    """JSON carries timestamps as ISO text and numbers as floats; jsonb columns arrive already parsed."""
    if isinstance(field, models.DateTimeField):
        return datetime_of
    if isinstance(field, models.DateField):
        return _date_of
    if isinstance(field, models.DecimalField):
        return _decimal_of
    return None


def _date_of(value: object) -> object:
    return parse_date(value) if isinstance(value, str) else value


def _decimal_of(value: object) -> object:
    return None if value is None else Decimal(str(value))


def datetime_of(value: str | None):
    return parse_datetime(value) if isinstance(value, str) else value
