"""Error pages: JSON under /api/ (clients parse it, the schema promises it), Django's HTML everywhere else."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

API_PREFIX = "/api/"


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A URL no route matches; inside the API that is a JSON 404 like any other."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
