from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from lucia_site.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("lucia_site.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz/", healthz, name="healthz"),
    path("hooks/", include("lucia_site.webhooks.urls")),
]

handler404 = "lucia_site.error_pages.not_found"
