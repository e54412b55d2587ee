"""Runs and escalations over HTTP: ids in, one runs.* call, result out. Always scoped to the caller's org."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.api_auth import acting_key, acting_user
from agents.models import AgentVersion, Deployment, VersionStatus
from runs import answers, cancellation, escalations, events, starts, submissions
from runs.api.serializers import (
    ESCALATION_STATUSES,
    RUN_STATUSES,
    AnswerRefusedSerializer,
    AnswerSerializer,
    CancelSerializer,
    EpisodeSerializer,
    EscalationSerializer,
    EventSerializer,
    EventUploadSerializer,
    ResolveSerializer,
    RunSerializer,
    StartRunSerializer,
    TimelineItemSerializer,
)
from runs.models import Escalation, EscalationKind, Run
from runs.timeline import timeline_for


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


RUN_ENDED = OpenApiResponse(description="The run has ended.")
ESCALATION_CLOSED = OpenApiResponse(description="The escalation is already answered or closed.")



def _actor(request: Request) -> dict:
    """Who acts, as the domain functions' keyword arguments: the session's user and/or the API key."""
    return {"by_user": acting_user(request), "by_key": acting_key(request)}


@extend_schema(tags=["runs"])
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = RunSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no caller organization
            return Run.objects.none()
        runs = (Run.objects.filter(organization=self.request.organization)
                .select_related("version__agent").prefetch_related("contacts", "tasks"))
        wanted = self.request.query_params.get("status")
        if wanted:
            if wanted not in RUN_STATUSES:
                raise exceptions.ValidationError({"status": f"use one of {', '.join(RUN_STATUSES)}"})
            runs = runs.filter(status=wanted)
        return runs

    @extend_schema(parameters=[OpenApiParameter("status", str, enum=RUN_STATUSES)])
    def list(self, request: Request, *args, **kwargs) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=StartRunSerializer, responses={201: RunSerializer})
    def create(self, request: Request) -> Response:
        body = StartRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        deployment, version = self._pin(data["agent"], data.get("version"))
        try:
            run = starts.start_run(
                request.organization, deployment=deployment, version=version, goal=data["goal"],
                contacts=data["contacts"], inputs=data["inputs"], external_ref=data["external_ref"],
                started_by=acting_user(request), started_by_key=acting_key(request),
            )
        except starts.StartError as error:
            raise exceptions.ValidationError({error.field: [error.message]}) from None
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data, status=status.HTTP_201_CREATED)

    def _pin(self, agent_slug: str, number: int | None) -> tuple[Deployment | None, AgentVersion | None]:
        """The caller's deployment of the agent, or its deployed version `number`; a 400 says what is missing."""
        organization = self.request.organization
        deployments = Deployment.objects.filter(organization=organization, agent__organization=organization,
                                                agent__slug=agent_slug, active=True).select_related("version__agent")
        if number is not None:
            version = AgentVersion.objects.filter(agent__organization=organization, agent__slug=agent_slug,
                                                  number=number, status=VersionStatus.PUBLISHED).first()
            if version is None:
                raise exceptions.ValidationError({"version": [f"{agent_slug} has no published version {number}"]})
            deployment = deployments.filter(version=version).first()
            if deployment is None:
                raise exceptions.ValidationError({"version": [starts.missing_deployment(organization, version)]})
            return deployment, None
        deployment = deployments.first()
        if deployment is None:
            message = (f"your organization ({organization.slug}) has no active deployment of {agent_slug!r}; "
                       f'deploy one with POST /api/v1/deployments/ {{"agent": "{agent_slug}", "version": N}} '
                       "(copy a template first with POST /api/v1/agents/ {\"from_template\": slug})")
            raise exceptions.ValidationError({"agent": [message]})
        return deployment, None

    # The whole story in one list, not a page of it.
    @extend_schema(responses={200: TimelineItemSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def timeline(self, request: Request, *args, **kwargs) -> Response:
        run = self.get_object()
        return Response([item.as_dict() for item in timeline_for(run)])

    @extend_schema(
        request={"application/json": EventSerializer, "multipart/form-data": EventUploadSerializer},
        responses={
            201: EpisodeSerializer, 200: OpenApiResponse(EpisodeSerializer, description="Already recorded (same key)."),
            400: OpenApiResponse(OpenApiTypes.OBJECT, description=(
                "A field is wrong: a sender who is not a run contact, a file without bytes, empty, too large "
                "or not what it claims to be.")),
            409: RUN_ENDED,
        },
        description="Feed the run an event. A message from a contact (`kind: inbound`) and any file must name "
                    "the `sender`, one of the run's contacts. Files count as evidence only as bytes: base64 "
                    "`attachments[].content_b64` in JSON, or multipart `files`; their type is read from the bytes.",
    )
    @action(detail=True, methods=["post"])
    def events(self, request: Request, *args, **kwargs) -> Response:
        run = self.get_object()
        multipart = request.content_type.startswith("multipart/")
        try:
            sent = request.data
        except RequestDataTooBig:
            raise exceptions.ValidationError({"attachments": [
                f"the request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes; "
                "upload large files as multipart `files`"]}) from None
        body = (EventUploadSerializer if multipart else EventSerializer)(data=sent)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        dedupe_key = f"api:{data['dedupe_key']}"
        try:
            episode = submissions.record(
                run, kind=data["kind"], dedupe_key=dedupe_key, sender=data["sender"], channel=data["channel"],
                text=data["text"], files=body.uploads(), extra={"data": data.get("data") or {}},
                files_field="files" if multipart else "attachments",
            )
        except submissions.Refused as error:
            raise exceptions.ValidationError({error.field: [error.message]}) from None
        except events.RunEnded as error:
            raise Conflict(str(error)) from None
        if episode is None:
            existing = run.episodes.get(dedupe_key=dedupe_key)
            return Response(EpisodeSerializer(existing).data, status=status.HTTP_200_OK)
        return Response(EpisodeSerializer(episode).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=CancelSerializer, responses={200: RunSerializer, 409: RUN_ENDED})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, *args, **kwargs) -> Response:
        run = self.get_object()
        body = CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            cancellation.cancel_run(run, reason=body.validated_data["reason"], **_actor(request))
        except cancellation.RunNotOpen as error:
            raise Conflict(str(error)) from None
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data)


@extend_schema(tags=["escalations"])
class EscalationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = EscalationSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no caller organization
            return Escalation.objects.none()
        found = Escalation.objects.filter(organization=self.request.organization)
        wanted = self.request.query_params.get("status")
        if wanted:
            if wanted not in ESCALATION_STATUSES:
                raise exceptions.ValidationError({"status": f"use one of {', '.join(ESCALATION_STATUSES)}"})
            found = found.filter(status=wanted)
        return found

    @extend_schema(parameters=[OpenApiParameter("status", str, enum=ESCALATION_STATUSES)])
    def list(self, request: Request, *args, **kwargs) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(request=AnswerSerializer,
                   responses={200: EscalationSerializer, 400: AnswerRefusedSerializer, 409: ESCALATION_CLOSED})
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, *args, **kwargs) -> Response:
        escalation = self.get_object()
        body = AnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            answers.answer(escalation, option=body.validated_data.get("option", ""), text=body.validated_data["text"],
                           data=body.validated_data["data"], via="api", **_actor(request))
        except answers.AnswerRefused as refused:
            return Response({"detail": refused.message, **({"preview": refused.preview} if refused.preview else {})},
                            status=status.HTTP_400_BAD_REQUEST)
        except (escalations.EscalationClosed, cancellation.RunNotOpen, events.RunEnded) as error:
            raise Conflict(str(error)) from None
        return Response(EscalationSerializer(get_object_or_404(self.get_queryset(), pk=escalation.pk)).data)

    @extend_schema(request=ResolveSerializer, responses={200: EscalationSerializer, 409: ESCALATION_CLOSED})
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, *args, **kwargs) -> Response:
        escalation = self.get_object()
        body = ResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if escalation.kind != EscalationKind.UNCERTAIN_SEND:
            raise exceptions.ValidationError({"outcome": ["only uncertain sends are resolved; answer questions"]})
        try:
            escalations.resolve(escalation, outcome=body.validated_data["outcome"], via="api", **_actor(request))
        except escalations.EscalationClosed as error:
            raise Conflict(str(error)) from None
        return Response(EscalationSerializer(get_object_or_404(self.get_queryset(), pk=escalation.pk)).data)
