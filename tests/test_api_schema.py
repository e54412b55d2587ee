import pytest
from django.core.management import call_command

AGENT_BUILDING_PATHS = [
    "/api/v1/agents/",
    "/api/v1/agents/{slug}/",
    "/api/v1/agents/{agent_slug}/versions/",
    "/api/v1/agents/{agent_slug}/versions/{number}/",
    "/api/v1/agents/{agent_slug}/versions/{number}/validate/",
    "/api/v1/agents/{agent_slug}/versions/{number}/publish/",
    "/api/v1/deployments/",
    "/api/v1/deployments/{id}/",
    "/api/v1/identities/",
    "/api/v1/identities/{id}/",
]


@pytest.mark.django_db
def test_schema_is_served_without_a_key_and_lists_the_agent_building_paths(client):
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert set(AGENT_BUILDING_PATHS) <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["ApiKey"]["name"] == "Authorization"
    # Secrets are write-only: the schema never promises them in a response.
    assert schema["components"]["schemas"]["Identity"]["properties"]["secrets"]["writeOnly"] is True


def test_schema_generates_valid_openapi_without_warnings(tmp_path):
    # --fail-on-warn: an untyped path parameter or an unresolvable serializer fails here, not in a client's generator.
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    assert "/api/v1/agents/{agent_slug}/versions/{number}/publish/" in target.read_text()


@pytest.mark.django_db
def test_docs_page_renders(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()


@pytest.mark.django_db
def test_the_schema_documents_the_timeline_as_the_plain_list_it_returns_and_every_error_answer(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    timeline = schema["paths"]["/api/v1/runs/{id}/timeline/"]["get"]["responses"]
    cancel = schema["paths"]["/api/v1/runs/{id}/cancel/"]["post"]["responses"]
    runs = schema["paths"]["/api/v1/runs/"]["get"]["responses"]

    assert timeline["200"]["content"]["application/json"]["schema"]["type"] == "array"
    assert {"400", "401", "403", "404"} <= set(timeline)
    assert {"400", "401", "403", "404", "409", "413"} <= set(cancel)
    assert "404" not in runs  # no path parameter, nothing to miss
    assert cancel["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorDetail"}
