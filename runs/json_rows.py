"""Model instances from rows a statement returned as JSON (`row_to_json`, `json_agg`).

The episode's hot path reads a run's children in one statement (runs.episode_loads): each child table comes back
as one JSON column, and this turns its objects into the model instances the rest of the runtime works with, as if
the ORM had read them (`from_db`: saving one updates its row).
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils.dateparse import parse_date, parse_datetime


def instances(model: type[models.Model], rows: list[dict] | None) -> list:
    return [instance(model, row) for row in rows or []]


def instance(model: type[models.Model], row: dict):
    fields = model._meta.concrete_fields
    return model.from_db("default", [field.attname for field in fields],
                         [_value(field, row.get(field.column)) for field in fields])


def _value(field: models.Field, value: object) -> object:
    """JSON carries timestamps as ISO text and numbers as floats; jsonb columns arrive already parsed."""
    if value is None:
        return None
    if isinstance(field, models.DateTimeField):
        return parse_datetime(value) if isinstance(value, str) else value
    if isinstance(field, models.DateField):
        return parse_date(value) if isinstance(value, str) else value
    if isinstance(field, models.DecimalField):
        return Decimal(str(value))
    return value


def datetime_of(value: str | None):
    return parse_datetime(value) if isinstance(value, str) else value
