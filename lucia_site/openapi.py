"""The API's OpenAPI generator: drf-spectacular's, plus the error answers every operation can give.

drf-spectacular documents only success codes, so a client (or schemathesis)
meets undocumented 400/401/403/404s. Every `/api/v1/` operation can refuse
input (400: a field error map, or NUL bytes anywhere), an unknown or missing
key (401) and a caller without the right (403); one with a path parameter can
answer 404 (another organization's object is a 404 too); one with a body, 413, and
415 for a body whose content type the operation does not read (a multipart
body with a malformed header, say).
"""

from drf_spectacular import openapi
from drf_spectacular.plumbing import ResolvedComponent

DETAIL = {
    "type": "object",
    "properties": {"detail": {"type": "string", "description": "What is wrong, for a person to read."}},
    "required": ["detail"],
}
# DRF's validation errors: {field: [message, ...]} (nested for nested fields), or {"detail": ...}.
FIELD_ERRORS = {
    "type": "object",
    "additionalProperties": True,
    "description": "Errors by field name (`non_field_errors` for the body as a whole), or a `detail` message.",
}

ERRORS = {
    "400": ("The request is malformed or a field is invalid; nothing was changed.", "ValidationErrors", FIELD_ERRORS),
    "401": ("No API key, or an unknown or revoked one.", "ErrorDetail", DETAIL),
    "403": ("The key may not do this (agent building needs a builder key).", "ErrorDetail", DETAIL),
    "404": ("No such object in the caller's organization.", "ErrorDetail", DETAIL),
    "413": ("The JSON body is larger than the server reads (LUCIA_MAX_JSON_BYTES).", "ErrorDetail", DETAIL),
    "415": ("The body's content type is not one the operation reads; send JSON.", "ErrorDetail", DETAIL),
}
BODY_ONLY = {"413", "415"}


class AutoSchema(openapi.AutoSchema):
    def _get_response_bodies(self, direction: str = "response") -> dict:
        responses = super()._get_response_bodies(direction)
        for code, (description, name, schema) in ERRORS.items():
            if code in responses or (code == "404" and "{" not in self.path):
                continue
            if code in BODY_ONLY and self.method not in ("POST", "PUT", "PATCH"):
                continue
            responses[code] = {"description": description, "content": self._json(name, schema)}
        for code, response in responses.items():
            # An error documented by description only (`OpenApiResponse(description=...)`) still answers {"detail"}.
            if code.startswith("4") and not response.get("content"):
                response["content"] = self._json("ErrorDetail", DETAIL)
        return responses

    def _json(self, name: str, schema: dict) -> dict:
        component = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=schema)
        self.registry.register_on_missing(component)
        return {"application/json": {"schema": component.ref}}
