"""The episode's start statement (runs.episode_loads) reads the contacts' addresses in SQL: they must come out as
connectors.addresses.normalize makes them, or a suppression (stored normalized) would not block a send."""

from __future__ import annotations

import pytest

from connectors import addresses
from connectors.models import Suppression
from runs import episode_loads
from runs.models import EpisodeKind
from tests.factories import ContactFactory
from tests.runs import loop_helpers

# Stored forms that validation lets through or older rows hold, with the channel they are read on.
STORED = [
    ("email", "email", "  Dana.Whitfield@Example.COM "),
    ("email", "email", "no-at-sign"),
    ("sms", "phone", "+1 (555) 555-0101"),
    ("sms", "phone", "+15555550199"),
    ("slack", "slack_user", " U0VENDOR "),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("channel", "column", "stored"), STORED)
def test_the_start_reads_each_contact_address_in_its_normal_form(channel, column, stored):
    run = loop_helpers.make_run()
    run.contacts.all().delete()
    ContactFactory(run=run, role="vendor", **{"email": "", "phone": "", "slack_user": "", column: stored})
    normal = addresses.normalize(channel, stored)
    for address in {normal, stored.strip()} - {""}:
        Suppression.objects.create(organization=run.organization, channel=channel, address=address, reason="stop")
    loop_helpers.add_episode(run, EpisodeKind.START)

    start = episode_loads.claim_and_start(run.pk, owner="test")

    suppressed = start.started.facts.suppressed
    assert suppressed == ({(channel, normal)} if normal else set())
    assert start.started.facts.is_suppressed(channel=channel, address=stored) is bool(normal)
