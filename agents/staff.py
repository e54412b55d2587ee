"""Which organizations a Studio user may see, and the admin mixin that scopes every page to them.

Superusers see every organization. Other staff see only the organizations whose
`staff` they belong to (Organization.staff); what they may do there is decided
by their groups' permissions (the roles Ops, Support, Builder, Viewer: agents.roles).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import FieldDoesNotExist
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from agents.models import Organization


def visible_organizations(user: AbstractBaseUser) -> QuerySet[Organization]:
    if not (user.is_active and user.is_staff):
        return Organization.objects.none()
    if user.is_superuser:
        return Organization.objects.all()
    return Organization.objects.filter(staff=user)


def scope_to_user(queryset: QuerySet, user: AbstractBaseUser, organization_path: str = "organization", *,
                  include_unowned: bool = False) -> QuerySet:
    """The rows of `queryset` whose organization (reached by `organization_path`) the user may see.

    `include_unowned`: rows without an organization (the shared agent templates) are visible to all staff.
    """
    if user.is_active and user.is_superuser:
        return queryset
    visible = Q(**{f"{organization_path}__in": visible_organizations(user)})
    if include_unowned and user.is_active and user.is_staff:
        visible |= Q(**{f"{organization_path}__isnull": True})
    return queryset.filter(visible)


def may_see_organization(user: AbstractBaseUser, organization: Organization | None) -> bool:
    return organization is not None and visible_organizations(user).filter(pk=organization.pk).exists()


class OrganizationScopedAdmin:
    """Admin mixin: the changelist, change pages, actions and choices only reach the user's organizations.

    Set `organization_path` to the lookup from the model to its Organization
    ("pk" for Organization itself); `unowned_visible = True` shows rows without
    an organization (templates) to every staff user. Foreign-key choices (and
    raw-id values) are narrowed to what the related model's own scoped admin
    shows, and related-object filters list only the objects the user's rows
    point at, so no other organization's names leak into a form or a sidebar.
    """

    organization_path = "organization"
    unowned_visible = False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return scope_to_user(super().get_queryset(request), request.user, self.organization_path,
                             include_unowned=self.unowned_visible)

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        related_admin = self.admin_site._registry.get(db_field.related_model)
        if isinstance(related_admin, OrganizationScopedAdmin):
            kwargs["queryset"] = related_admin.get_queryset(request)
        elif db_field.related_model is Organization:
            kwargs["queryset"] = visible_organizations(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_list_filter(self, request: HttpRequest):
        return [self._scoped_filter(entry) for entry in super().get_list_filter(request)]

    def _scoped_filter(self, entry):
        if not isinstance(entry, str):
            return entry
        try:
            field = get_fields_from_path(self.model, entry)[-1]
        except (FieldDoesNotExist, NotRelationField):
            return entry
        # RelatedFieldListFilter would list every organization (or agent) in the database.
        return (entry, admin.RelatedOnlyFieldListFilter) if field.is_relation else entry
