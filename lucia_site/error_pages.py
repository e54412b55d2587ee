"""Error pages: JSON under /api/ (clients parse it, the schema promises it), the Studio's own pages under /admin/,
Django's plain pages everywhere else."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.template import loader
from django.template.response import TemplateResponse
from django.views import defaults

API_PREFIX = "/api/"
STUDIO_PREFIX = "/admin/"


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A URL no route matches, or an object that does not exist (or is not the user's to see)."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Not found."}, status=404)
    if request.path.startswith(STUDIO_PREFIX) and getattr(request, "user", None) is not None \
            and request.user.is_active and request.user.is_staff:
        context = {**admin.site.each_context(request), "request_path": request.path, "title": "Not found"}
        return TemplateResponse(request, "admin/404.html", context, status=404).render()
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """No request context and no database: whatever failed may be the database itself."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": "Server error."}, status=500)
    if request.path.startswith(STUDIO_PREFIX):
        return HttpResponseServerError(loader.get_template("admin/500.html").render())
    return defaults.server_error(request)
