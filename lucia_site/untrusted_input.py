"""Refusing request input PostgreSQL or Python cannot hold, before any view sees it.

PostgreSQL rejects NUL in text and jsonb (and lone UTF-16 surrogates and
non-finite numbers in jsonb); Python's JSON decoder recurses once per nesting
level. Left to the views, each of these is a 500 at the first write or a
worker stuck decoding. Here each is a 400 that names what is wrong and where.
"""

from __future__ import annotations

import json
import math

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

# Deep enough for every body the API documents (agent configs nest about eight levels).
MAX_JSON_DEPTH = 32

NUL_DETAIL = "NUL characters (\\u0000) are not accepted"


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class RefuseNulBytes:
    """Middleware: a NUL in the path, query string, a header or a form-encoded body is a 400."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = nul_location(request)
        if where:
            return JsonResponse({"detail": f"{NUL_DETAIL} in the {where}."}, status=400)
        return self.get_response(request)


def nul_location(request: HttpRequest) -> str:
    """Which part of the request carries a NUL ('' when none does)."""
    if "\x00" in request.path_info:
        return "path"
    # A percent-encoded "%" is "%25", so "%00" in the raw query string is always an encoded NUL.
    query = request.META.get("QUERY_STRING", "")
    if "%00" in query or "\x00" in query:
        return "query string"
    if any("\x00" in value for name, value in request.META.items() if name.startswith("HTTP_")):
        return "headers"
    if request.content_type == "application/x-www-form-urlencoded":
        body = request.body
        if b"%00" in body or b"\x00" in body:
            return "form body"
    return ""


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, plus: a size limit, strict UTF-8, a nesting limit, no NUL or lone surrogates, finite
    numbers only."""

    def parse(self, stream, media_type=None, parser_context=None) -> object:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        limit = settings.LUCIA_MAX_JSON_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise BodyTooLarge(f"JSON bodies are limited to {limit} bytes.")
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise ParseError(f"The body is not valid {encoding} text.") from None
        try:
            data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except RecursionError:
            raise ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted.") from None
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
        problem = json_problem(data)
        if problem:
            raise ParseError(problem)
        return data


class FormParser(parsers.FormParser):
    """DRF's form parser; a NUL in a field name or value is a 400."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        _refuse_nul_fields(data)
        return data


class MultiPartParser(parsers.MultiPartParser):
    """DRF's multipart parser; a NUL in a field name, value or file name is a 400 (file bytes may hold anything)."""

    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        _refuse_nul_fields(parsed.data)
        names = [name for name, uploads in parsed.files.lists() for name in [name, *(u.name or "" for u in uploads)]]
        if any("\x00" in name for name in names):
            raise ParseError(f"{NUL_DETAIL} in a file field or file name.")
        return parsed


def _refuse_nul_fields(data) -> None:
    for name, values in data.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            raise ParseError(f"{NUL_DETAIL} in form field {name!r}.")


def json_problem(data: object) -> str:
    """What makes decoded JSON unstorable ('' when nothing does); walks iteratively, so depth cannot overflow."""
    stack: list[tuple[object, str, int]] = [(data, "$", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted (at {path})."
        if isinstance(node, str):
            if problem := _text_problem(node):
                return f"{problem} (at {path})."
        elif isinstance(node, dict):
            for key, value in node.items():
                if problem := _text_problem(key):
                    return f"{problem} in a key (at {path})."
                stack.append((value, f"{path}.{key}", depth + 1))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{index}]", depth + 1) for index, item in enumerate(node))
    return ""


def _text_problem(text: str) -> str:
    if "\x00" in text:
        return NUL_DETAIL
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Unpaired UTF-16 surrogates (\\ud800-\\udfff) are not accepted"
    return ""


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value
