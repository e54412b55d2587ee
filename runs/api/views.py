"""Runs and escalations over HTTP: ids in, one runs.* call, result out. Always scoped to the caller's org."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import AgentVersion, Deployment, VersionStatus
from runs import cancellation, escalations, events, starts
from runs.api.serializers import (
    ESCALATION_STATUSES,
    RUN_STATUSES,
    AnswerSerializer,
    CancelSerializer,
    EpisodeSerializer,
    EscalationSerializer,
    EventSerializer,
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


def _via(request: Request) -> str:
    api_key = getattr(request, "auth", None)
    return f"api:{api_key.name}" if hasattr(api_key, "name") else "api"


def _user(request: Request):
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


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
            )
        except starts.StartError as error:
            raise exceptions.ValidationError({error.field: [error.message]}) from None
        return Response(RunSerializer(self.get_queryset().get(pk=run.pk)).data, status=status.HTTP_201_CREATED)

    def _pin(self, agent_slug: str, number: int | None) -> tuple[Deployment | None, AgentVersion | None]:
        if number is not None:
            version = AgentVersion.objects.filter(agent__slug=agent_slug, number=number,
                                                  status=VersionStatus.PUBLISHED).first()
            if version is None:
                raise exceptions.ValidationError({"version": [f"{agent_slug} has no published version {number}"]})
            return None, version
        deployment = Deployment.objects.filter(organization=self.request.organization, agent__slug=agent_slug,
                                               active=True).select_related("version").first()
        if deployment is None:
            message = f"your organization has no active deployment of {agent_slug!r}; deploy it or give a version"
            raise exceptions.ValidationError({"agent": [message]})
        return deployment, None

    # The whole story in one list, not a page of it.
    @extend_schema(responses={200: TimelineItemSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def timeline(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        return Response([item.as_dict() for item in timeline_for(run)])

    @extend_schema(request=EventSerializer, responses={201: EpisodeSerializer, 200: EpisodeSerializer, 409: RUN_ENDED})
    @action(detail=True, methods=["post"])
    def events(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = EventSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        dedupe_key = f"api:{data.pop('dedupe_key')}"
        kind = data.pop("kind")
        try:
            episode = events.record_event(run, kind=kind, payload=data, dedupe_key=dedupe_key)
        except events.RunEnded as error:
            raise Conflict(str(error)) from None
        if episode is None:
            existing = run.episodes.get(dedupe_key=dedupe_key)
            return Response(EpisodeSerializer(existing).data, status=status.HTTP_200_OK)
        return Response(EpisodeSerializer(episode).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=CancelSerializer, responses={200: RunSerializer, 409: RUN_ENDED})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        body = CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            cancellation.cancel_run(run, reason=body.validated_data["reason"])
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

    @extend_schema(request=AnswerSerializer, responses={200: EscalationSerializer, 409: ESCALATION_CLOSED})
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str) -> Response:
        escalation = self.get_object()
        body = AnswerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if escalation.kind == EscalationKind.UNCERTAIN_SEND:
            raise exceptions.ValidationError({"answer": ["an uncertain send is settled with POST …/resolve/"]})
        try:
            escalations.answer(escalation, answer=body.validated_data["answer"], by_user=_user(request),
                               via=_via(request))
        except escalations.EscalationClosed as error:
            raise Conflict(str(error)) from None
        return Response(EscalationSerializer(get_object_or_404(self.get_queryset(), pk=pk)).data)

    @extend_schema(request=ResolveSerializer, responses={200: EscalationSerializer, 409: ESCALATION_CLOSED})
    @action(detail=True, methods=["post"])
    def resolve(self, request: Request, pk: str) -> Response:
        escalation = self.get_object()
        body = ResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if escalation.kind != EscalationKind.UNCERTAIN_SEND:
            raise exceptions.ValidationError({"outcome": ["only uncertain sends are resolved; answer questions"]})
        try:
            escalations.resolve(escalation, outcome=body.validated_data["outcome"], by_user=_user(request),
                                via=_via(request))
        except escalations.EscalationClosed as error:
            raise Conflict(str(error)) from None
        return Response(EscalationSerializer(get_object_or_404(self.get_queryset(), pk=pk)).data)
