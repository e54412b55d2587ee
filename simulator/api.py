"""`POST /api/v1/agents/{slug}/versions/{number}/simulate/`: score a version now and return its scorecard.

The action itself sits on agents.api.views.VersionViewSet (it shares the
version lookup and permissions); this module holds its body and serializers.
With the scripted model a scorecard takes well under a second per case, so
the request runs it synchronously.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.api_auth import caller_organization
from agents.models import AgentVersion
from simulator import scorecards


class SimulateSerializer(serializers.Serializer):
    # Stored in a PostgreSQL integer column.
    seed = serializers.IntegerField(required=False, default=0, min_value=0, max_value=2**31 - 1)
    weeks = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=52,
        help_text="Virtual weeks per case; default: each case's own.",
    )


class CaseScoreSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField()
    passed = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())
    metrics = serializers.JSONField()
    run_id = serializers.IntegerField(allow_null=True, help_text="The simulated run (sim=true) behind the case.")


class ScorecardSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField()
    version = serializers.IntegerField()
    version_id = serializers.IntegerField()
    config_hash = serializers.CharField()
    passed = serializers.BooleanField()
    seed = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    metrics = serializers.JSONField()
    cases = CaseScoreSerializer(many=True)


SIMULATE_SCHEMA = extend_schema(
    request=SimulateSerializer,
    responses={
        200: ScorecardSerializer,
        409: OpenApiResponse(description="The version has config errors and cannot be simulated."),
    },
    description="Simulate every case that counts for the version (golden + approved generated) and save the "
    "scorecard the publish gate reads. A failing scorecard is still 200: `passed` says how it went.",
)


def simulate(request: Request, version: AgentVersion) -> Response:
    """Run the scorecard for `version` on behalf of the caller's organization (in its sandbox shadow)."""
    options = SimulateSerializer(data=request.data or {})
    options.is_valid(raise_exception=True)
    try:
        card = scorecards.score(version, organization=caller_organization(request), **options.validated_data)
    except scorecards.SimulationError as error:
        return Response({"detail": str(error)}, status=status.HTTP_409_CONFLICT)
    return Response(scorecards.as_dict(card))
