"""Bad input is a 400 (or a JSON 404) naming what is wrong, never a 500, and nothing is stored."""

import json

import pytest
from rest_framework.test import APIClient

from agents.models import ApiKey
from lucia_site import untrusted_input
from runs.models import Episode, Run
from tests.factories import ContactFactory, RunFactory, api_key_for, deployed_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    organization, deployment = deployed_agent()
    run = RunFactory(organization=organization, version=deployment.version)
    ContactFactory(run=run)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(organization, role=ApiKey.Role.BUILDER)}")
    return client, deployment, run


def start_body(deployment, **changes) -> dict:
    body = {"agent": deployment.agent.slug, "goal": "Collect the W-9",
            "contacts": [{"role": "vendor", "email": "vera@example.com"}]}
    return {**body, **changes}


def post_json(client, url: str, text: str | bytes):
    return client.generic("POST", url, text, content_type="application/json")


@pytest.mark.parametrize("url", [
    "/api/v1/agents/w9%00/", "/api/v1/agents/w9%00/versions/", "/api/v1/runs/1%00/timeline/", "/admin/%00/",
])
def test_a_nul_in_the_path_is_a_400(world, url):
    client, _, _ = world
    response = client.get(url)
    assert response.status_code == 400
    assert "NUL" in response.json()["detail"] and "path" in response.json()["detail"]


@pytest.mark.parametrize("query", ["agent=w9%00", "active=%00", "status=a%00b", "limit=%00"])
def test_a_nul_in_the_query_string_is_a_400(world, query):
    client, _, _ = world
    response = client.get(f"/api/v1/deployments/?{query}")
    assert response.status_code == 400
    assert "query string" in response.json()["detail"]


def test_a_nul_in_a_header_is_a_400(world):
    client, _, _ = world
    response = client.get("/api/v1/runs/", HTTP_X_LUCIA_ORGANIZATION="acme\x00")
    assert response.status_code == 400
    assert "headers" in response.json()["detail"]


@pytest.mark.parametrize("change", [
    {"goal": "W-9\x00please"},
    {"inputs": {"invoice\x00": "INV-1"}},
    {"inputs": {"invoice": "INV\x00-1"}},
    {"contacts": [{"role": "vendor", "email": "vera@example.com", "name": "Ve\x00ra"}]},
])
def test_a_nul_in_json_keys_or_values_is_a_400_and_nothing_is_stored(world, change):
    client, deployment, _ = world
    before = Run.objects.count()

    response = post_json(client, "/api/v1/runs/", json.dumps(start_body(deployment, **change)))

    assert response.status_code == 400
    assert "NUL" in response.json()["detail"]
    assert Run.objects.count() == before


def test_a_nul_in_an_event_attachment_names_where_it_is(world):
    client, _, run = world
    body = {"dedupe_key": "e1", "attachments": [{"filename": "w9\x00.pdf"}]}

    response = post_json(client, f"/api/v1/runs/{run.pk}/events/", json.dumps(body))

    assert response.status_code == 400
    assert "$.attachments[0].filename" in response.json()["detail"]
    assert not Episode.objects.filter(run=run).exists()


def test_a_nul_in_form_or_multipart_fields_is_a_400(world):
    client, _, run = world
    url = f"/api/v1/runs/{run.pk}/cancel/"

    form = client.post(url, "reason=left%00", content_type="application/x-www-form-urlencoded")
    multipart = client.post(url, {"reason": "left\x00"}, format="multipart")

    assert (form.status_code, multipart.status_code) == (400, 400)
    assert Run.objects.get(pk=run.pk).status != "cancelled"


def test_json_nested_past_the_limit_is_a_400_at_any_depth(world):
    client, deployment, _ = world
    depth = untrusted_input.MAX_JSON_DEPTH
    just_too_deep = {"inputs": json.loads('{"a":' * (depth - 1) + "1" + "}" * (depth - 1))}
    absurdly_deep = '{"inputs":' + "[" * 100_000 + "]" * 100_000 + "}"

    for text in (json.dumps(start_body(deployment, **just_too_deep)), absurdly_deep):
        response = post_json(client, "/api/v1/runs/", text)
        assert response.status_code == 400
        assert f"deeper than {depth}" in response.json()["detail"]


def test_json_at_the_depth_limit_is_accepted():
    at_limit = json.loads("[" * untrusted_input.MAX_JSON_DEPTH + "]" * untrusted_input.MAX_JSON_DEPTH)
    assert untrusted_input.json_problem(at_limit) == ""
    assert "deeper than" in untrusted_input.json_problem([at_limit])


@pytest.mark.parametrize(("text", "said"), [
    ('{"goal": NaN}', "NaN"),
    ('{"goal": Infinity}', "Infinity"),
    ('{"inputs": {"amount": 1e400}}', "out of range"),
    ('{"goal": "\\ud800"}', "surrogates"),
    (b'{"goal": "\xff\xfe"}', "not valid utf-8"),
    ("[1, 2]", "dictionary"),
    ("", "required"),
    ("{", "JSON parse error"),
])
def test_malformed_json_bodies_are_400s_that_say_why(world, text, said):
    client, _, _ = world
    response = post_json(client, "/api/v1/runs/", text)
    assert response.status_code == 400
    assert said.lower() in response.content.decode().lower()


@pytest.mark.parametrize(("url", "body"), [
    ("/api/v1/runs/", {"version": 10**30}),
    ("/api/v1/runs/", {"version": -1}),
    ("/api/v1/deployments/", {"version": 10**30}),
    ("/api/v1/deployments/", {"version": "latest"}),
])
def test_huge_or_wrong_typed_numbers_are_400s(world, url, body):
    client, deployment, _ = world
    response = client.post(url, start_body(deployment, **body) if url == "/api/v1/runs/" else body, format="json")
    assert response.status_code == 400


def test_a_huge_simulation_seed_is_a_400(world):
    client, deployment, _ = world
    version = deployment.version
    url = f"/api/v1/agents/{version.agent.slug}/versions/{version.number}/simulate/"
    response = client.post(url, {"seed": -(10**20)}, format="json")
    assert response.status_code == 400
    assert "seed" in response.json()


@pytest.mark.parametrize("url", [
    "/api/v1/runs/not-a-number/", "/api/v1/runs/99999999999999999999999/", "/api/v1/runs/1.5e10/timeline/",
    "/api/v1/escalations/abc/", "/api/v1/identities/99999999999999999999999/", "/api/v1/agents/w9/versions/x/",
    "/api/v1/no-such-collection/",
])
def test_malformed_ids_in_paths_are_json_404s(world, url):
    client, _, _ = world
    response = client.get(url)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(("method", "url", "body"), [
    ("get", "/api/v1/runs/?status=sleeping", None),
    ("get", "/api/v1/escalations/?status=open%20please", None),
    ("post", "/api/v1/runs/{run}/events/", {"dedupe_key": "k", "kind": "telepathy"}),
    ("post", "/api/v1/identities/", {"channel": "pigeon", "address": "coop"}),
])
def test_invalid_enum_values_are_400s(world, method, url, body):
    client, _, run = world
    url = url.format(run=run.pk)
    response = client.get(url) if method == "get" else client.post(url, body, format="json")
    assert response.status_code == 400


def test_a_huge_page_size_is_capped(world):
    client, deployment, _ = world
    response = client.get("/api/v1/runs/", {"limit": str(10**23), "offset": str(10**23)})

    assert response.status_code == 200
    assert response.json()["results"] == []


def test_the_page_size_ceiling_applies_to_what_the_database_is_asked(world):
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from lucia_site.pagination import MAX_PAGE_SIZE, LimitOffsetPagination

    request = Request(APIRequestFactory().get("/api/v1/runs/", {"limit": "1000000"}))
    assert LimitOffsetPagination().get_limit(request) == MAX_PAGE_SIZE


def test_a_json_body_over_the_size_limit_is_a_413(world, settings):
    client, deployment, _ = world
    settings.LUCIA_MAX_JSON_BYTES = 1000
    body = json.dumps(start_body(deployment, goal="x" * 2000))

    response = post_json(client, "/api/v1/runs/", body)

    assert response.status_code == 413
    assert "1000 bytes" in response.json()["detail"]


@pytest.mark.parametrize(("source", "path"), [
    ("slug: w9\n? [a, b]\n: 1\n", "<root>"),
    ("slug: w9\nfollowup: {? {a: b}: 1}\n", "followup"),
    ("[" * 5000, "<yaml>"),
    ("a: &a [*a]\n", "<yaml>"),
])
def test_yaml_a_builder_cannot_store_is_a_draft_with_errors_not_a_500(world, source, path):
    client, deployment, _ = world

    response = client.post(f"/api/v1/agents/{deployment.agent.slug}/versions/", {"source": source}, format="json")

    assert response.status_code == 201
    assert response.json()["validation"]["ok"] is False
    assert response.json()["validation"]["errors"][0]["path"] == path
