"""runs.model_rows: an instance built from a row's values is the one Model.from_db builds."""

from __future__ import annotations

import pytest
from django.db.models.signals import post_init

from runs import model_rows
from runs.models import Episode, EpisodeStatus, Run, RunStatus
from tests.factories import EpisodeFactory, RunFactory

pytestmark = pytest.mark.django_db


def _values(instance) -> tuple[list[str], list]:
    fields = type(instance)._meta.concrete_fields
    return [field.attname for field in fields], [getattr(instance, field.attname) for field in fields]


def _same(built, expected) -> None:
    assert type(built) is type(expected)
    assert built.__dict__.keys() - {"_state"} == expected.__dict__.keys() - {"_state"}
    assert {name: value for name, value in vars(built).items() if name != "_state"} == {
        name: value for name, value in vars(expected).items() if name != "_state"}
    assert (built._state.adding, built._state.db) == (expected._state.adding, expected._state.db) == (False, "default")
    assert built.get_deferred_fields() == expected.get_deferred_fields()


def test_a_row_becomes_the_instance_from_db_builds_and_saves_as_one():
    run = RunFactory(state={"v": 1})
    names, values = _values(Run.objects.get(pk=run.pk))

    built = model_rows.from_db(Run, "default", names, values)

    _same(built, Run.from_db("default", names, values))
    assert built.status == RunStatus.ACTIVE
    assert built.organization == run.organization  # the foreign key reads through its id
    built.state = {"v": 2}
    built.save(update_fields=["state"])
    assert Run.objects.get(pk=run.pk).state == {"v": 2}


def test_fields_left_out_stay_deferred_and_a_protected_state_still_moves_only_by_transition():
    episode = EpisodeFactory()
    names, values = _values(Episode.objects.get(pk=episode.pk))
    kept = [index for index, name in enumerate(names) if name in ("id", "run_id", "status", "seq")]

    built = model_rows.from_db(Episode, "default", [names[i] for i in kept], [values[i] for i in kept])

    _same(built, Episode.from_db("default", [names[i] for i in kept], [values[i] for i in kept]))
    assert "payload" in built.get_deferred_fields()
    with pytest.raises(AttributeError):
        built.status = EpisodeStatus.DONE


def test_an_init_listener_gets_its_call():
    run = RunFactory()
    names, values = _values(Run.objects.get(pk=run.pk))
    seen = []

    def listener(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(listener, sender=Run)
    try:
        built = model_rows.from_db(Run, "default", names, values)
    finally:
        post_init.disconnect(listener, sender=Run)

    assert seen == [built]
