"""OpenAPI descriptions drf-spectacular cannot derive on its own."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter


class ApiKeyScheme(OpenApiAuthenticationExtension):
    # Registered on import by class path; agents.api.views imports this module.
    target_class = "agents.api_auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema) -> dict:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Api-Key <key>`; the key's organization scopes every request.",
        }


AGENT_SLUG = OpenApiParameter("agent_slug", str, OpenApiParameter.PATH, description="The agent's slug.")
