"""`/api/v1/escalation-route/`: where the caller organization's escalations are announced.

GET lists the route (one, or none yet); POST sets it, replacing the previous
one. Identities are named by id and must be the organization's own
(runs.escalation_routes checks, as for the Studio).
"""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from agents.api_auth import IsBuilderOrReadOnly
from connectors.models import Identity
from runs import escalation_routes
from runs.models import EscalationRoute


class EscalationRouteSerializer(serializers.ModelSerializer):
    email_identity = serializers.IntegerField(source="email_identity_id", allow_null=True, required=False,
                                              min_value=1, max_value=2**63 - 1,
                                              help_text="Id of one of your email identities: the notice's sender.")
    slack_identity = serializers.IntegerField(source="slack_identity_id", allow_null=True, required=False,
                                              min_value=1, max_value=2**63 - 1,
                                              help_text="Id of one of your Slack identities: the bot that posts.")

    class Meta:
        model = EscalationRoute
        fields = ["email_identity", "email_to", "slack_identity", "slack_channel", "timezone", "quiet_start",
                  "quiet_end", "updated_at"]
        read_only_fields = ["updated_at"]


class CanManageRoute(IsBuilderOrReadOnly):
    message = "Changing the escalation route needs a builder API key or a staff user."


@extend_schema(tags=["escalations"])
class EscalationRouteViewSet(viewsets.GenericViewSet):
    serializer_class = EscalationRouteSerializer
    permission_classes = [CanManageRoute]
    pagination_class = None

    @extend_schema(responses=EscalationRouteSerializer(many=True),
                   summary="The organization's escalation route (a list of one, or empty when none is set)")
    def list(self, request: Request) -> Response:
        route = escalation_routes.route_of(request.organization)
        return Response([EscalationRouteSerializer(route).data] if route else [])

    @extend_schema(request=EscalationRouteSerializer, responses={200: EscalationRouteSerializer},
                   summary="Set (replace) the organization's escalation route")
    def create(self, request: Request) -> Response:
        serializer = EscalationRouteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            route = escalation_routes.set_route(
                request.organization,
                email_identity=_identity(request, data.get("email_identity_id"), field="email_identity"),
                email_to=data.get("email_to", ""),
                slack_identity=_identity(request, data.get("slack_identity_id"), field="slack_identity"),
                slack_channel=data.get("slack_channel", ""),
                timezone=data.get("timezone", "UTC"),
                quiet_start=data.get("quiet_start"),
                quiet_end=data.get("quiet_end"),
            )
        except escalation_routes.RouteRefused as refused:
            raise serializers.ValidationError({refused.field: [refused.message]}) from None
        return Response(EscalationRouteSerializer(route).data, status=status.HTTP_200_OK)


def _identity(request: Request, identity_id: int | None, *, field: str) -> Identity | None:
    if identity_id is None:
        return None
    found = Identity.objects.filter(pk=identity_id, organization=request.organization).first()
    if found is None:
        # The same answer as for a wrong channel or an inactive one: nothing about other organizations.
        channel = "email" if field == "email_identity" else "slack"
        raise serializers.ValidationError({field: [f"Choose one of your organization's active {channel} identities."]})
    return found
