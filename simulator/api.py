"""The simulator over HTTP: score a version now, and read what its simulations did.

`POST /api/v1/agents/{slug}/versions/{number}/simulate/` sits on
agents.api.views.VersionViewSet (it shares the version lookup and
permissions); this module holds its body and serializers. With the scripted
model a scorecard takes well under a second per case, so the request runs it
synchronously.

`GET /api/v1/simulations/` (`{id}/`, `{id}/cases/{name}/timeline/`): the
caller's simulations, i.e. those run in its sandbox shadow organization
(simulator.sim_org), and each case's timeline by calendar day in that
organization's zone. Another organization's simulation is a 404.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from agents.api_auth import caller_organization
from agents.models import AgentVersion
from simulator import scorecards, sim_org
from simulator.models import Simulation


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
    simulation_id = serializers.IntegerField(allow_null=True, help_text="Read each case's timeline under "
                                             "/api/v1/simulations/{simulation_id}/cases/{name}/timeline/.")


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


class SimulationSerializer(serializers.ModelSerializer):
    agent = serializers.CharField(source="version.agent.slug")
    version = serializers.IntegerField(source="version.number")
    cases = serializers.SerializerMethodField()

    class Meta:
        model = Simulation
        fields = ["id", "agent", "version", "status", "seed", "weeks", "started_at", "finished_at", "cases"]

    def get_cases(self, simulation: Simulation) -> list[dict]:
        """Each case's verdict; its timeline is read one case at a time."""
        return [{key: result.get(key) for key in ("name", "kind", "passed", "reasons", "metrics", "run_id")}
                for result in simulation.results or []]


class TimelineRowSerializer(serializers.Serializer):
    day = serializers.IntegerField(help_text="Calendar day in the organization's zone; 0 is the start date.")
    at = serializers.DateTimeField()
    local = serializers.CharField(help_text="Weekday and time in the organization's zone.")
    type = serializers.CharField()
    kind = serializers.CharField()
    channel = serializers.CharField(allow_blank=True)
    direction = serializers.CharField(allow_blank=True)
    summary = serializers.CharField(allow_blank=True)


class CaseTimelineSerializer(serializers.Serializer):
    simulation = serializers.IntegerField()
    case = serializers.CharField()
    run_id = serializers.IntegerField(allow_null=True)
    passed = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())
    timeline = TimelineRowSerializer(many=True)


@extend_schema(tags=["simulations"])
class SimulationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = SimulationSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no caller organization
            return Simulation.objects.none()
        # Simulations run in the caller's sandbox shadow, never in the organization itself (simulator.sim_org).
        return (Simulation.objects.filter(organization__slug=sim_org.shadow_slug(self.request.organization),
                                          organization__sandbox=True)
                .select_related("version__agent").order_by("-started_at", "-id"))

    @extend_schema(responses={200: CaseTimelineSerializer, 404: OpenApiResponse(description="No such case.")})
    @action(detail=True, methods=["get"], url_path=r"cases/(?P<case_name>[^/]+)/timeline", pagination_class=None)
    def case_timeline(self, request: Request, *args, case_name: str, **kwargs) -> Response:
        simulation = self.get_object()
        result = next((r for r in simulation.results or [] if r.get("name") == case_name), None)
        if result is None:
            names = ", ".join(r.get("name", "") for r in simulation.results or []) or "none"
            raise Http404(f"simulation {simulation.pk} has no case {case_name!r}; its cases: {names}")
        return Response({"simulation": simulation.pk, "case": case_name, "run_id": result.get("run_id"),
                         "passed": bool(result.get("passed")), "reasons": result.get("reasons") or [],
                         "timeline": result.get("timeline") or []})


def register(router: BaseRouter) -> None:
    router.register("simulations", SimulationViewSet, basename="simulation")
