from email.utils import parseaddr

import pytest

from connectors import addresses


@pytest.mark.parametrize(("given", "expected"), [
    ("Dana@Vendor.TEST", "dana@vendor.test"),
    ("  Dana Smith <Dana@Vendor.test> ", "dana@vendor.test"),
    ("not an address", ""),
])
def test_emails_normalize_to_the_lower_cased_addr_spec(given, expected):
    assert addresses.normalize_email(given) == expected


@pytest.mark.parametrize("given", [
    " Dana.Smith+invoices@Vendor-1.example.TEST ", "a_b%c-d@x", "x@[127.0.0.1]", "dana..smith@vendor.test",
    ".dana@vendor.test", "dana@vendor..test", "dana@.vendor.test", "dana@vendor.test.", '"dana smith"@vendor.test',
    "dana@vendor.test, ops@vendor.test", "dana(ops)@vendor.test",
])
def test_a_bare_address_normalizes_as_parseaddr_reads_it(given):
    # normalize_email skips parseaddr for bare dot-atom addresses: the forms it skips and the ones it does not
    # come out as parseaddr's addr-spec would.
    _, spec = parseaddr(given.strip())
    assert addresses.normalize_email(given) == (spec.strip().lower() if "@" in spec else "")


@pytest.mark.parametrize(("given", "expected"), [
    ("+1 (415) 555-0100", "+14155550100"), ("14155550100", "+14155550100"), ("call me", ""),
])
def test_numbers_normalize_to_plus_digits(given, expected):
    assert addresses.normalize_phone(given) == expected


def test_same_compares_in_normal_form_and_never_matches_empty():
    assert addresses.same("email", "DANA@vendor.test", "Dana <dana@VENDOR.test>")
    assert addresses.same("sms", "+1 415 555 0100", "+14155550100")
    assert not addresses.same("email", "", "")


@pytest.mark.parametrize(("channel", "address", "ok"), [
    ("sms", "+14155550100", True), ("voice", "4155550100", False), ("sms", "+0123456789", False),
    ("email", "ap@acme.test", True), ("email", "ap@", False), ("email", "ap acme.test", False),
    ("slack", "T0123ABCD", True), ("slack", "t0123abcd", False), ("slack", "U0123ABCD", False),
])
def test_format_problem_names_what_is_wrong_per_channel(channel, address, ok):
    assert (addresses.format_problem(channel, address) is None) is ok


def test_on_domain_covers_subdomains_but_not_lookalikes():
    assert addresses.on_domain("x@In.Lucia.test", "in.lucia.test")
    assert addresses.on_domain("x@mx.in.lucia.test", "in.lucia.test")
    assert not addresses.on_domain("x@evilin.lucia.test", "in.lucia.test")
