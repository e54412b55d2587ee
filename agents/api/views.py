"""Agents, versions and deployments over HTTP: ids in, one agents.versions or simulator.gate call, result out.

Agents and versions are global definitions any organization may read; only
builder keys (or staff) change them. Deployments belong to the caller's
organization and are never visible to another one.

Status codes: a draft's bad YAML is not a request error, so creating or
validating it answers 201/200 with `ok: false` and every error. Editing a
published version and every publish refusal (invalid config, not a draft, a
failing gate scorecard) are 409: the request is well formed, the version's
state forbids it.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.shortcuts import get_object_or_404
from django.utils.functional import cached_property
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents import versions
from agents.api import openapi
from agents.api.serializers import (
    AgentSerializer,
    DeploymentSerializer,
    PublishRefusalSerializer,
    SourceSerializer,
    ValidationResultSerializer,
    VersionSerializer,
    VersionSummarySerializer,
)
from agents.api_auth import IsBuilderOrReadOnly
from agents.models import Agent, AgentVersion, Deployment
from simulator import api as simulator_api
from simulator import gate


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object's state does not allow this."
    default_code = "conflict"


def acting_user(request: Request) -> AbstractBaseUser | None:
    """The staff user behind a session request; None for API keys, which act for an organization."""
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def error_dicts(errors: list) -> list[dict[str, str]]:
    # versions.validate returns ConfigError objects; gate refusals already carry dicts.
    return [error.as_dict() if hasattr(error, "as_dict") else dict(error) for error in errors]


@extend_schema(tags=["agents"])
class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet):
    queryset = Agent.objects.all()
    serializer_class = AgentSerializer
    permission_classes = [IsBuilderOrReadOnly]
    lookup_field = "slug"

    def perform_create(self, serializer: AgentSerializer) -> None:
        serializer.instance = versions.create_agent(**serializer.validated_data)


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
        return get_object_or_404(Agent, slug=self.kwargs["agent_slug"])

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
