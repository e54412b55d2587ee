"""`/api/v1/identities/`: an organization's mailboxes, numbers and Slack bots.

Secrets are write-only: requests send `secrets` as {name: value}, responses
show only `secret_names`. A PATCH merges secrets in (an empty value removes
one). DELETE deactivates rather than deletes, so messages sent from the
identity keep their sender and the address can be registered again.
"""

import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import IntegrityError, transaction
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, viewsets
from rest_framework.routers import BaseRouter

from agents.api_auth import IsBuilderOrReadOnly
from connectors import identities
from connectors.models import Identity

SECRET_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class IdentitySerializer(serializers.ModelSerializer):
    secrets = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        write_only=True,
        required=False,
        help_text="{name: value}; stored encrypted and never returned. An empty value removes that secret.",
    )
    secret_names = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Identity
        fields = [
            "id",
            "channel",
            "address",
            "display_name",
            "sandbox",
            "active",
            "secrets",
            "secret_names",
            "created_at",
        ]
        read_only_fields = ["id", "secret_names", "created_at"]
        # The partial unique constraint is checked in validate(), with a message a person can act on.
        validators = []

    def validate_secrets(self, value: dict[str, str]) -> dict[str, str]:
        bad = sorted(name for name in value if not SECRET_NAME.fullmatch(name))
        if bad:
            raise serializers.ValidationError(
                f"Invalid secret names: {', '.join(bad)}. Use letters, digits, '_', '.', '-' (up to 64)."
            )
        return value

    def validate(self, attrs: dict) -> dict:
        identity: Identity | None = self.instance
        if identity is not None:
            # Threads and inbound routing hang on the address; a new address is a new identity.
            moved = [
                name for name in ("channel", "address") if name in attrs and attrs[name] != getattr(identity, name)
            ]
            if moved:
                raise serializers.ValidationError({name: "Cannot change; create a new identity." for name in moved})
        if identity is None or attrs.get("sandbox") or (attrs.get("active") and not identity.active):
            try:
                normalized = identities.check_identity(
                    self.context["request"].organization,
                    channel=attrs.get("channel", getattr(identity, "channel", "")),
                    address=attrs.get("address", getattr(identity, "address", "")),
                    sandbox=attrs.get("sandbox", getattr(identity, "sandbox", False)),
                    active=attrs.get("active", getattr(identity, "active", True)),
                    excluding=identity,
                )
            except identities.IdentityRefused as refused:
                raise serializers.ValidationError({refused.field: refused.message}) from None
            if identity is None:
                attrs["address"] = normalized
        return attrs


class CanManageIdentities(IsBuilderOrReadOnly):
    message = "Changing identities needs a builder API key or a staff user."


@extend_schema(tags=["identities"])
@extend_schema_view(destroy=extend_schema(description="Deactivates the identity; it stays listed with active=false."))
class IdentityViewSet(viewsets.ModelViewSet):
    serializer_class = IdentitySerializer
    permission_classes = [CanManageIdentities]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no caller, no organization
            return Identity.objects.none()
        return Identity.objects.filter(organization=self.request.organization).order_by("channel", "address", "id")

    def perform_create(self, serializer: IdentitySerializer) -> None:
        data = serializer.validated_data
        with _address_guard():
            serializer.instance = identities.create_identity(
                self.request.organization,
                channel=data["channel"],
                address=data["address"],
                display_name=data.get("display_name", ""),
                secret_values=data.get("secrets"),
                sandbox=data.get("sandbox", False),
            )

    def perform_update(self, serializer: IdentitySerializer) -> None:
        data = serializer.validated_data
        with _address_guard():
            identity = identities.update_identity(
                serializer.instance,
                display_name=data.get("display_name"),
                sandbox=data.get("sandbox"),
                active=data.get("active"),
            )
            if "secrets" in data:
                identities.set_secrets(identity, secret_values=data["secrets"])

    def perform_destroy(self, instance: Identity) -> None:
        identities.update_identity(instance, active=False)


@contextmanager
def _address_guard() -> Iterator[None]:
    """Turns a lost race on the unique active address into the same 400 that validate() gives."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError:
        raise serializers.ValidationError({"address": identities.UNAVAILABLE}) from None
    except identities.IdentityRefused as refused:
        raise serializers.ValidationError({refused.field: refused.message}) from None


def register(router: BaseRouter) -> None:
    router.register("identities", IdentityViewSet, basename="identity")
