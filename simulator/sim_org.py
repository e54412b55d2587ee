"""The organization simulated runs belong to, with a sandbox identity on every channel.

Simulations never run inside a customer organization: a persona's STOP would
suppress the address there, sim sends would count against its per-contact
caps, and a real identity could be picked for a send. Each organization gets
a shadow `<slug>-sim` organization instead (the seed's demo org approach:
get-or-create, sandbox identities only); with no organization, one shared
`simulation` organization serves the command line.
"""

from __future__ import annotations

import zlib

from django.db import IntegrityError, transaction

from agents.models import Organization
from connectors import identities
from connectors.models import Identity

SHARED_SLUG = "simulation"
SHARED_TIMEZONE = "America/New_York"
SUFFIX = "-sim"


class NotASandbox(ValueError):
    """The shadow organization's slug belongs to a real organization."""


def organization_for(organization: Organization | None = None) -> Organization:
    """The sandbox organization for simulations on behalf of `organization` (None: the shared one)."""
    if organization is None:
        slug, name, tz = SHARED_SLUG, "Simulation", SHARED_TIMEZONE
    elif organization.slug.endswith(SUFFIX) or organization.slug == SHARED_SLUG:
        slug, name, tz = organization.slug, organization.name, organization.default_timezone
    else:
        slug = shadow_slug(organization)
        name, tz = f"{organization.name} (simulation)", organization.default_timezone
    return _shadow(slug, name=name, timezone=tz)


def lane_organization(shadow: Organization, lane: int) -> Organization:
    """The shadow organization of parallel lane `lane` of a simulation in `shadow` (lane 0 is `shadow`).

    `simulate --jobs N` runs its cases in N processes, each in its own shadow, so an
    organization-wide effect of one case (a provider outage, a cap) never reaches a case
    running beside it.
    """
    if lane == 0:
        return shadow
    base = shadow.slug.removesuffix(SUFFIX)
    tag = f"-lane{lane}"
    slug = f"{base[: 80 - len(SUFFIX) - len(tag)]}{tag}{SUFFIX}"
    return _shadow(slug, name=f"{shadow.name} lane {lane}", timezone=shadow.default_timezone)


def _shadow(slug: str, *, name: str, timezone: str) -> Organization:
    sim, _ = Organization.objects.get_or_create(
        slug=slug, defaults={"name": name, "default_timezone": timezone, "sandbox": True}
    )
    if not sim.sandbox:
        # Never simulate inside a real organization: a persona's STOP would suppress real addresses there.
        raise NotASandbox(f"organization {slug!r} is not a sandbox organization; rename it to free the slug "
                          "for simulations, or tick 'sandbox' on it in the Studio if it is one")
    ensure_identities(sim)
    return sim


def shadow_slug(organization: Organization) -> str:
    """The slug of the organization's sandbox shadow (which may not exist yet)."""
    if organization.slug.endswith(SUFFIX):
        return organization.slug
    return f"{organization.slug[: 80 - len(SUFFIX)]}{SUFFIX}"


def ensure_identities(organization: Organization) -> list[Identity]:
    """One active sandbox identity per channel; addresses are derived from the slug so they never collide."""
    wanted = sandbox_addresses(organization.slug)
    have = set(
        Identity.objects.filter(organization=organization, active=True, sandbox=True).values_list("channel", flat=True)
    )
    for channel, address in wanted.items():
        if channel in have:
            continue
        try:
            with transaction.atomic():
                identities.create_identity(
                    organization, channel=channel, address=address, display_name=f"{organization.name} sandbox",
                    sandbox=True,
                )
        except IntegrityError:
            pass  # a concurrent simulation created it first
    return list(Identity.objects.filter(organization=organization, active=True, sandbox=True))


def sandbox_addresses(slug: str) -> dict[str, str]:
    # Area code 555 is not assigned to anyone; the crc keeps two sim orgs' numbers apart.
    n = zlib.crc32(slug.encode()) % 10_000_000
    return {
        "email": f"agent@{slug}.sandbox.lucia.localhost",
        "sms": f"+1555{n:07d}",
        "voice": f"+1556{n:07d}",
        "slack": f"TSIM{n:07d}",
    }
