"""Routes of the agent-building API, added to the site's `/api/v1/` router."""

from rest_framework.routers import BaseRouter

from agents.api import views


def register(router: BaseRouter) -> None:
    router.register("agents", views.AgentViewSet, basename="agent")
    # Versions are numbered per agent, so they live under the agent's slug.
    router.register(r"agents/(?P<agent_slug>[^/.]+)/versions", views.VersionViewSet, basename="agent-version")
    router.register("templates", views.TemplateViewSet, basename="template")
    router.register("deployments", views.DeploymentViewSet, basename="deployment")
