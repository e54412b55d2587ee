"""Studio users for test-client tests: staff with exactly the permissions named, in the organizations given."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission


def staff_user(username: str, *, perms: tuple[str, ...] = (), organizations=(), superuser: bool = False):
    """`perms` as "app.codename"; the user belongs to `organizations` (Organization.staff)."""
    user = get_user_model().objects.create_user(username, password="x" * 16, is_staff=True, is_superuser=superuser)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    for organization in organizations:
        organization.staff.add(user)
    return get_user_model().objects.get(pk=user.pk)  # fresh: no cached permissions
