"""DRF authentication and permissions: `Authorization: Api-Key <key>`, one organization per caller."""

from django.contrib.auth.models import AbstractBaseUser
from rest_framework import authentication, exceptions, permissions

from agents import api_keys
from agents.models import ApiKey, Organization

ACT_AS_PERMISSION = "agents.act_as_organization"
ORGANIZATION_HEADER = "X-Lucia-Organization"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Api-Key"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        scheme, _, plain = header.partition(" ")
        if scheme != self.keyword:
            return None
        api_key = api_keys.find_active_key(plain.strip())
        if api_key is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API key.")
        request.organization = api_key.organization
        return (None, api_key)

    def authenticate_header(self, request) -> str:
        return self.keyword


def caller_organization(request) -> Organization | None:
    """The organization a request acts for: the API key's, or a staff user's chosen one.

    Staff sessions name it with the `X-Lucia-Organization` header (a slug),
    defaulting to the only organization when there is just one. Only
    superusers and staff holding `agents.act_as_organization` may act for an
    organization that way; anyone else gets PermissionDenied saying so.
    """
    api_key = acting_key(request)
    if api_key is not None:
        return api_key.organization
    user = acting_user(request)
    if user is None:
        return None
    slug = request.headers.get(ORGANIZATION_HEADER)
    if not may_act_as_organization(user):
        if user.is_staff or slug:
            raise exceptions.PermissionDenied(
                f"{user} may not act for an organization: that needs a staff superuser or the "
                f"{ACT_AS_PERMISSION!r} permission. Use an organization's API key instead."
            )
        return None
    if slug:
        organization = Organization.objects.filter(slug=slug).first()
        if organization is None:
            raise exceptions.PermissionDenied(f"{ORGANIZATION_HEADER}: no organization {slug!r}.")
        return organization
    orgs = list(Organization.objects.all()[:2])
    return orgs[0] if len(orgs) == 1 else None


def may_act_as_organization(user) -> bool:
    return bool(user.is_active and user.is_staff and (user.is_superuser or user.has_perm(ACT_AS_PERMISSION)))


def acting_key(request) -> ApiKey | None:
    """The API key behind the request, None for a session."""
    api_key = getattr(request, "auth", None)
    return api_key if isinstance(api_key, ApiKey) else None


def acting_user(request) -> AbstractBaseUser | None:
    """The user behind a session request; None for API keys, which act for an organization."""
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def is_builder(request) -> bool:
    api_key = acting_key(request)
    if api_key is not None:
        return api_key.is_builder
    user = acting_user(request)
    return bool(user and may_act_as_organization(user))


class HasOrganization(permissions.BasePermission):
    message = "Send `Authorization: Api-Key <key>` (or, as staff, an X-Lucia-Organization header)."

    def has_permission(self, request, view) -> bool:
        organization = caller_organization(request)
        if organization is None:
            return False
        request.organization = organization
        return True


class IsBuilder(HasOrganization):
    message = "Building agents needs a builder API key or a staff user."

    def has_permission(self, request, view) -> bool:
        return super().has_permission(request, view) and is_builder(request)


class IsBuilderOrReadOnly(HasOrganization):
    message = "Changing agents needs a builder API key or a staff user."

    def has_permission(self, request, view) -> bool:
        if not super().has_permission(request, view):
            return False
        return request.method in permissions.SAFE_METHODS or is_builder(request)
