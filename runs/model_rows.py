"""Model instances built from a row's values as Django's `Model.from_db` builds them, without `Model.__init__`'s
per-field work.

The hot path reads about a dozen rows per episode as instances (runs.statements, runs.json_rows), and `__init__`
spent more time than the rest of their reading: a `setattr` through each field's descriptor, the init signals, the
kwargs checks. For a model whose descriptors only store the value (Django's deferred attributes, django-fsm's state
descriptor without state proxies) and no init signal listener, the instance is the same: its `__dict__` holds each
value under its field's attname (a field left out stays deferred, as `from_db` leaves it) and its `_state` says it
was read from `db`. Any other model, or any init listener, goes through `from_db` itself.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django.db import models
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init
from django_fsm import FSMFieldDescriptor


def from_db(model: type[models.Model], db: str, attnames: Sequence[str], values: Sequence) -> models.Model:
    """`model.from_db(db, attnames, values)`: `attnames` are concrete fields' attnames, `values` their values."""
    if pre_init.receivers or post_init.receivers or not _plain(model):
        return model.from_db(db, attnames, values)
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = instance._state = ModelState()
    state.adding = False
    state.db = db
    return instance


@functools.cache
def _plain(model: type[models.Model]) -> bool:
    """Whether `Model.from_db` would only store each value in `__dict__`: no `__init__` or `from_db` of the model's
    own, and every concrete field's descriptor one that stores the value as given (a foreign key's also drops a
    cached related object, which a new instance does not have)."""
    if model.__init__ is not models.Model.__init__ or model.from_db.__func__ is not models.Model.from_db.__func__:
        return False
    for field in model._meta.concrete_fields:
        descriptor = model.__dict__.get(field.attname)
        if type(descriptor) in (DeferredAttribute, ForeignKeyDeferredAttribute):
            continue
        if not (type(descriptor) is FSMFieldDescriptor and not field.state_proxy and field.attname == field.name):
            return False
    return True
