"""Email addresses, phone numbers and Slack ids: the one normal form every module compares in.

Identities, contacts' send keys, suppressions, inbound routing and the
simulator all compare addresses; they normalize through here so that
`Dana@Vendor.test` and `dana@vendor.test`, or `+1 (415) 555-0100` and
`+14155550100`, are one person everywhere.
"""

from __future__ import annotations

import functools
import re
from email.utils import parseaddr

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

PHONE_CHANNELS = ("sms", "voice")
# E.164: a plus, a country code not starting with 0, at most 15 digits in all.
E164 = re.compile(r"\+[1-9][0-9]{6,14}")
# A bare address whose local part and domain are dot-atoms (RFC 5322 3.2.3, letters, digits and the usual symbols):
# parseaddr returns it as it is.
DOT_ATOM_ADDRESS = re.compile(r"[A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*")
# Slack workspace (team) ids: T followed by upper-case letters and digits.
SLACK_TEAM = re.compile(r"T[A-Z0-9]{2,31}")


@functools.lru_cache(maxsize=4096)
def normalize_email(address: str) -> str:
    """The lower-cased addr-spec, display name and angle brackets removed; '' when there is none."""
    # Cached: an episode normalizes its contacts' addresses a dozen times, and parseaddr is slow (about 50 us): a
    # bare dot-atom address, the usual form, is its own addr-spec and skips it.
    address = address.strip()
    if DOT_ATOM_ADDRESS.fullmatch(address):
        return address.lower()
    _, addr = parseaddr(address)
    return addr.strip().lower() if "@" in addr else ""


def normalize_phone(number: str) -> str:
    """`+<digits>` (E.164 when the input was a full international number); '' when there are no digits."""
    digits = re.sub(r"[^0-9]", "", number)
    return f"+{digits}" if digits else ""


def normalize(channel: str, address: str) -> str:
    """The address in the form stored and compared on `channel` (email, sms/voice; others are trimmed)."""
    if channel == "email":
        return normalize_email(address)
    if channel in PHONE_CHANNELS:
        return normalize_phone(address)
    return address.strip()


def same(channel: str, first: str, second: str) -> bool:
    """True when both name the same non-empty address on `channel`."""
    left = normalize(channel, first)
    return bool(left) and left == normalize(channel, second)


def is_e164(number: str) -> bool:
    return bool(E164.fullmatch(number))


def is_email(address: str) -> bool:
    try:
        validate_email(address)
    except ValidationError:
        return False
    return True


def domain_of(address: str) -> str:
    return normalize_email(address).rpartition("@")[2]


def on_domain(address: str, domain: str) -> bool:
    """True when the email address is on `domain` or one of its subdomains."""
    found, domain = domain_of(address), domain.strip().lower().rstrip(".")
    return bool(found and domain) and (found == domain or found.endswith("." + domain))


def format_problem(channel: str, address: str) -> str | None:
    """Why `address` is not a well-formed address on `channel`, or None when it is."""
    if channel == "email" and not is_email(address):
        return f"{address!r} is not an email address"
    # Spaces, dots, dashes and brackets are presentation; the plus and the country code are not.
    if channel in PHONE_CHANNELS and not is_e164(re.sub(r"[\s().-]", "", address)):
        return f"{address!r} is not an E.164 number like +14155550123"
    if channel == "slack" and not SLACK_TEAM.fullmatch(address):
        return f"{address!r} is not a Slack team id like T0123ABCD"
    return None
