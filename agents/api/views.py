"""Agents, versions and deployments over HTTP: ids in, one agents.versions or simulator.gate call, result out.

Agents, their versions and deployments belong to one organization: the
caller sees and changes only its own, and another organization's agent is a
404 like one that does not exist. Templates (agents of no organization) are
read through `/templates/` by everyone and changed by no one; a builder copies
one with `POST /agents/ {"from_template": slug}` and edits the copy. Only
builder keys (or staff allowed to act for an organization) change anything.

Status codes: a draft's bad YAML is not a request error, so creating or
validating it answers 201/200 with `ok: false` and every error. Editing a
published version and every publish refusal (invalid config, not a draft, a
failing gate scorecard) are 409: the request is well formed, the version's
state forbids it.
"""

from django.utils.functional import cached_property
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents import versions
from agents.api import openapi
from agents.api.serializers import (
    AgentCreateSerializer,
    AgentSerializer,
    DeploymentSerializer,
    PublishRefusalSerializer,
    SourceSerializer,
    TemplateSerializer,
    ValidationResultSerializer,
    VersionSerializer,
    VersionSummarySerializer,
)
from agents.api_auth import IsBuilderOrReadOnly, acting_user
from agents.models import Agent, AgentVersion, Deployment
from simulator import api as simulator_api
from simulator import gate


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object's state does not allow this."
    default_code = "conflict"


def error_dicts(errors: list) -> list[dict[str, str]]:
    # versions.validate returns ConfigError objects; gate refusals already carry dicts.
    return [error.as_dict() if hasattr(error, "as_dict") else dict(error) for error in errors]


@extend_schema(tags=["agents"])
@extend_schema_view(create=extend_schema(request=AgentCreateSerializer, responses={201: AgentSerializer}))
class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = AgentSerializer
    permission_classes = [IsBuilderOrReadOnly]
    lookup_field = "slug"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no caller, no organization
            return Agent.objects.none()
        return Agent.objects.filter(organization=self.request.organization)

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = AgentCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            if data.get("from_template"):
                template = Agent.objects.filter(organization__isnull=True, slug=data["from_template"]).first()
                if template is None:
                    raise exceptions.ValidationError(
                        {"from_template": f"no template {data['from_template']!r}; see GET /api/v1/templates/"}
                    )
                agent = versions.copy_template(template, organization=request.organization,
                                               user=acting_user(request)).agent
            else:
                agent = versions.create_agent(request.organization, slug=data["slug"], name=data["name"],
                                              description=data["description"])
        except versions.SlugTaken as taken:
            raise exceptions.ValidationError({"slug": str(taken)}) from None
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["templates"])
class TemplateViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Shared template agents: readable by every organization, copied with POST /agents/, never edited."""

    queryset = Agent.objects.filter(organization__isnull=True)
    serializer_class = TemplateSerializer
    lookup_field = "slug"


@extend_schema(tags=["agents"], parameters=[openapi.AGENT_SLUG])
@extend_schema_view(
    create=extend_schema(request=SourceSerializer, responses={201: VersionSerializer}),
    partial_update=extend_schema(
        request=SourceSerializer,
        responses={200: VersionSerializer, 409: OpenApiResponse(description="The version is published or retired.")},
    ),
)
class VersionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    permission_classes = [IsBuilderOrReadOnly]
    lookup_field = "number"
    http_method_names = ["get", "post", "patch", "head", "options"]

    @cached_property
    def agent(self) -> Agent:
        # Only the caller's own agents: another organization's is a 404 like a missing one.
        slug = self.kwargs["agent_slug"]
        agent = Agent.objects.filter(organization=self.request.organization, slug=slug).first()
        if agent is None:
            if Agent.objects.filter(organization__isnull=True, slug=slug).exists():
                # Templates are public, so naming one reveals nothing: say how to get an editable copy.
                raise exceptions.NotFound(
                    f"{slug!r} is a template, read-only here: read it at /api/v1/templates/{slug}/ or copy it "
                    f'with POST /api/v1/agents/ {{"from_template": "{slug}"}}'
                )
            raise exceptions.NotFound()
        return agent

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no agent in the URL
            return AgentVersion.objects.none()
        return AgentVersion.objects.filter(agent=self.agent).select_related("agent")

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return VersionSummarySerializer if self.action == "list" else VersionSerializer

    def create(self, request: Request, *args, **kwargs) -> Response:
        source = self._source(request)
        version = versions.create_draft(self.agent, source=source, user=acting_user(request))
        return Response(VersionSerializer(version).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, *args, **kwargs) -> Response:
        version = self.get_object()
        source = self._source(request)
        try:
            version = versions.update_draft(version, source=source)
        except versions.VersionReadOnly:
            detail = f"v{version.number} is {version.status}; only drafts can be edited. Create a new draft."
            raise Conflict(detail) from None
        return Response(VersionSerializer(version).data)

    @extend_schema(request=None, responses={200: ValidationResultSerializer})
    @action(detail=True, methods=["post"])
    def validate(self, request: Request, *args, **kwargs) -> Response:
        result = versions.validate(self.get_object())
        return Response({"ok": result.ok, "errors": error_dicts(result.errors)})

    @simulator_api.SIMULATE_SCHEMA
    @action(detail=True, methods=["post"])
    def simulate(self, request: Request, *args, **kwargs) -> Response:
        return simulator_api.simulate(request, self.get_object())

    @extend_schema(request=None, responses={200: VersionSerializer, 409: PublishRefusalSerializer})
    @action(detail=True, methods=["post"])
    def publish(self, request: Request, *args, **kwargs) -> Response:
        try:
            published = gate.publish(self.get_object(), user=acting_user(request))
        except gate.PublishRefused as refusal:
            body = {"detail": refusal.reason, "scorecard": refusal.scorecard, "errors": error_dicts(refusal.errors)}
            return Response(body, status=status.HTTP_409_CONFLICT)
        return Response(VersionSerializer(published).data)

    @extend_schema(request=None, responses={200: VersionSerializer, 409: OpenApiResponse(
        description="Not published, or still deployed to the organization.")})
    @action(detail=True, methods=["post"])
    def retire(self, request: Request, *args, **kwargs) -> Response:
        try:
            retired = versions.retire(self.get_object())
        except versions.VersionError as refused:
            raise Conflict(str(refused)) from None
        return Response(VersionSerializer(retired).data)

    def _source(self, request: Request) -> str:
        serializer = SourceSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data["source"]


@extend_schema(tags=["deployments"])
@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("agent", str, description="Only this agent's deployments (slug)."),
            OpenApiParameter("active", bool, description="Only active (true) or inactive (false) deployments."),
        ],
    ),
)
class DeploymentViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet
):
    serializer_class = DeploymentSerializer
    permission_classes = [IsBuilderOrReadOnly]

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no caller, no organization
            return Deployment.objects.none()
        deployments = Deployment.objects.filter(organization=self.request.organization).select_related(
            "agent", "version"
        )
        if agent := self.request.query_params.get("agent"):
            deployments = deployments.filter(agent__slug=agent)
        if (active := self.request.query_params.get("active")) is not None:
            deployments = deployments.filter(active=active.lower() in ("1", "true", "yes"))
        return deployments.order_by("-created_at", "-id")

    def perform_create(self, serializer: DeploymentSerializer) -> None:
        try:
            serializer.instance = versions.deploy(self.request.organization, serializer.validated_data["version"])
        except versions.NotDeployable as error:  # retired between validation and the write
            raise serializers.ValidationError({"version": str(error)}) from None
