"""A sender is a run contact only when one normalization makes both sides equal."""

import pytest

from runs import senders

CONTACTS = [
    {"role": "vendor", "email": "Dana@Whitfield.example", "phone": "+1 555 555 0101", "slack_user": ""},
    {"role": "buyer", "email": "", "phone": "", "slack_user": "U024BE7LH"},
]


@pytest.mark.parametrize(("sender", "channel", "roles"), [
    ("dana@whitfield.example", "email", ["vendor"]),
    ("Dana Whitfield <DANA@whitfield.example>", "", ["vendor"]),
    ("+15555550101", "sms", ["vendor"]),
    ("+1 (555) 555-0101", "", ["vendor"]),
    ("+15555550101", "voice", ["vendor"]),
    ("U024BE7LH", "slack", ["buyer"]),
    ("mallory@whitfield.example", "email", []),
    ("dana@whitfield.example.evil", "email", []),
    ("5555550101", "sms", []),
    ("U024BE7LX", "slack", []),
    ("", "email", []),
])
def test_roles_of_matches_the_sender_to_contacts(sender, channel, roles):
    assert senders.roles_of(CONTACTS, sender=sender, channel=channel) == roles


def test_an_email_address_never_matches_a_phone_or_slack_field():
    contacts = [{"role": "odd", "email": "", "phone": "", "slack_user": "dana@whitfield.example"}]
    assert senders.roles_of(contacts, sender="dana@whitfield.example", channel="email") == []
