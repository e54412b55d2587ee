import base64

import pytest
from django.utils.crypto import salted_hmac

from connectors import message_ids

KEY = "0f" * 32


def test_reply_address_round_trips_to_the_run_id():
    address = message_ids.reply_address(4821)

    assert address.startswith("reply+4821-") and address.endswith("@in.lucia.test")
    assert message_ids.parse_reply_address(address) == 4821
    assert message_ids.parse_reply_address(f"Acme Billing <{address.upper()}>") == 4821


@pytest.mark.parametrize(
    "address",
    [
        "reply+4822-{mac}@in.lucia.test",  # another run's id under this run's mac
        "reply+4821-{mac}@elsewhere.test",  # our token on a foreign domain
        "reply+4821@in.lucia.test",  # no mac
        "billing+4821-{mac}@in.lucia.test",  # wrong prefix
        "not an address",
    ],
)
def test_forged_or_foreign_reply_addresses_name_no_run(address):
    mac = message_ids.reply_token(4821).split("-")[1]

    assert message_ids.parse_reply_address(address.format(mac=mac)) is None


def test_reply_token_depends_on_secret_key(settings):
    token = message_ids.reply_token(7)
    settings.SECRET_KEY = "another-secret-key-entirely-different-0123456789"

    assert message_ids.reply_token(7) != token
    assert message_ids.parse_reply_token(token) is None


def test_reply_token_is_the_salted_hmac_of_the_run_id_as_addresses_already_sent_carry_it(settings):
    # Reply addresses out in the world must keep finding their runs: the mac is salted_hmac's, base32, 16 letters.
    for secret in ("first-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz", "second-secret-key-9876543210-zyxw"):
        settings.SECRET_KEY = secret
        for run_id in (1, 7, 4821, 10**12):
            digest = salted_hmac("lucia.connectors.reply_token", str(run_id), secret=secret,
                                 algorithm="sha256").digest()
            mac = base64.b32encode(digest).decode().rstrip("=").lower()[:16]

            assert message_ids.reply_token(run_id) == f"{run_id}-{mac}"


def test_message_id_is_deterministic_and_parses_back_to_the_key_prefix():
    message_id = message_ids.message_id_for(KEY)

    assert message_id == message_ids.message_id_for(KEY) == f"<{KEY[:32]}@in.lucia.test>"
    assert message_ids.parse_message_id(message_id) == KEY[:32]
    assert message_ids.parse_message_id("<CAF=abc@mail.gmail.com>") is None
    assert message_ids.parse_message_id(f"<{KEY[:32]}@other.test>") is None


def test_key_prefixes_found_in_threading_headers_newest_first():
    older, newer = "a" * 64, "b" * 64
    references = f"<x1@mail.vendor.test> {message_ids.message_id_for(older)} {message_ids.message_id_for(newer)}"

    assert message_ids.key_prefixes_in(None, references) == ["b" * 32, "a" * 32]
    assert message_ids.split_references(references)[0] == "<x1@mail.vendor.test>"
