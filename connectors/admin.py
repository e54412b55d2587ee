"""The Studio's identity pages. Secrets are write-only: typed in, never shown again.

Only `secret_names` is displayed; values go straight to
`connectors.identities`, which encrypts them.
"""

from __future__ import annotations

import re

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from agents.admin import SuperuserDeleteMixin
from agents.staff import OrganizationScopedAdmin
from connectors import identities
from connectors.models import Identity

SECRET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class WriteOnlyTextarea(forms.Textarea):
    """Never renders a value, not even the one just posted when the form has errors."""

    def format_value(self, value: object) -> None:
        return None


def parse_secret_lines(text: str) -> dict[str, str]:
    """`name=value` per line → dict; blank lines are skipped, `name=` means remove that secret."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not SECRET_NAME.fullmatch(name):
            # Do not echo the line: it may hold a secret.
            raise forms.ValidationError(f"line {number}: write name=value (a name of letters, digits and _)")
        values[name] = value.strip()
    return values


class IdentityForm(forms.ModelForm):
    secrets = forms.CharField(
        required=False,
        widget=WriteOnlyTextarea(attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One name=value per line (e.g. auth_token=…). Values are encrypted and never shown again; "
        "leave empty to keep the stored secrets, write name= to remove one.",
    )

    class Meta:
        model = Identity
        fields = ["organization", "channel", "address", "display_name", "sandbox", "active"]

    def clean_secrets(self) -> dict[str, str]:
        return parse_secret_lines(self.cleaned_data.get("secrets") or "")

    def clean(self) -> dict:
        data = super().clean()
        identity = self.instance if self.instance.pk else None
        organization = data.get("organization") or getattr(identity, "organization", None)
        if organization is None or "channel" not in data or "address" not in data:
            return data
        if identity is not None and not (
                (data.get("sandbox") and not identity.sandbox) or (data.get("active") and not identity.active)):
            return data
        try:
            data["address"] = identities.check_identity(
                organization, channel=data["channel"], address=data["address"], sandbox=data.get("sandbox", False),
                active=data.get("active", True), excluding=identity)
        except identities.IdentityRefused as refused:
            self.add_error(refused.field if refused.field in self.fields else None, refused.message)
        return data


@admin.register(Identity)
class IdentityAdmin(OrganizationScopedAdmin, SuperuserDeleteMixin, admin.ModelAdmin):
    form = IdentityForm
    list_display = ["address", "channel", "organization", "display_name", "sandbox", "active", "secret_names"]
    list_filter = ["channel", "sandbox", "active", "organization"]
    list_select_related = ["organization"]
    search_fields = ["address", "display_name", "organization__slug"]
    autocomplete_fields = ["organization"]
    fields = ["organization", "channel", "address", "display_name", "sandbox", "active", "secrets", "secret_names"]
    readonly_fields = ["secret_names"]

    def save_form(self, request: HttpRequest, form: IdentityForm, change: bool) -> Identity:
        if change:
            return super().save_form(request, form, change)
        data = form.cleaned_data
        return identities.create_identity(
            data["organization"], channel=data["channel"], address=data["address"], display_name=data["display_name"],
            secret_values={name: value for name, value in data["secrets"].items() if value}, sandbox=data["sandbox"],
        )

    def save_model(self, request: HttpRequest, obj: Identity, form: IdentityForm, change: bool) -> None:
        if not change:
            return  # save_form created it through connectors.identities
        # Plain fields come from the form; the encrypted column is written only by connectors.identities.
        changed = [name for name in IdentityForm.Meta.fields if name in form.changed_data]
        if changed:
            obj.save(update_fields=changed)
        if form.cleaned_data["secrets"]:
            identities.set_secrets(obj, secret_values=form.cleaned_data["secrets"])

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        pass  # no many-to-many fields; form.save_m2m does not exist after save_form created the row
