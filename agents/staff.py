"""Which organizations a Studio user may see, and the admin mixin that scopes every page to them.

Superusers see every organization. Other staff see only the organizations whose
`staff` they belong to (Organization.staff); what they may do there is decided
by their groups' permissions (the roles Ops, Support, Builder, Viewer).
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from agents.models import Organization


def visible_organizations(user: AbstractBaseUser) -> QuerySet[Organization]:
    if not (user.is_active and user.is_staff):
        return Organization.objects.none()
    if user.is_superuser:
        return Organization.objects.all()
    return Organization.objects.filter(staff=user)


def scope_to_user(queryset: QuerySet, user: AbstractBaseUser, organization_path: str = "organization") -> QuerySet:
    """The rows of `queryset` whose organization (reached by `organization_path`) the user may see."""
    if user.is_active and user.is_superuser:
        return queryset
    return queryset.filter(**{f"{organization_path}__in": visible_organizations(user)})


def may_see_organization(user: AbstractBaseUser, organization: Organization | None) -> bool:
    return organization is not None and visible_organizations(user).filter(pk=organization.pk).exists()


class OrganizationScopedAdmin:
    """Admin mixin: the changelist, change pages and actions only reach the user's organizations.

    Set `organization_path` to the lookup from the model to its Organization.
    Foreign-key choices pointing at Organization are narrowed the same way.
    """

    organization_path = "organization"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return scope_to_user(super().get_queryset(request), request.user, self.organization_path)

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        if db_field.related_model is Organization:
            kwargs["queryset"] = visible_organizations(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def scope_with_templates(
    queryset: QuerySet, user: AbstractBaseUser, organization_path: str = "organization"
) -> QuerySet:
    """Like scope_to_user for agents and their versions, plus templates (no organization): every Studio user
    reads them, and only `manage.py seed` changes them."""
    if not (user.is_active and user.is_staff):
        return queryset.none()
    if user.is_superuser:
        return queryset
    return queryset.filter(
        Q(**{f"{organization_path}__in": visible_organizations(user)}) | Q(**{f"{organization_path}__isnull": True})
    )
