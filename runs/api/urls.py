"""Routes of the runtime API, added to the site's `/api/v1/` router."""

from rest_framework.routers import BaseRouter

from runs.api import escalation_routes, views


def register(router: BaseRouter) -> None:
    router.register("runs", views.RunViewSet, basename="run")
    router.register("escalations", views.EscalationViewSet, basename="escalation")
    router.register("escalation-route", escalation_routes.EscalationRouteViewSet, basename="escalation-route")
