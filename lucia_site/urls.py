from django.contrib import admin
from django.urls import include, path, reverse_lazy
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from lucia_site.health import healthz

# Lucia Studio: the Django admin under Lucia's name; "View site" opens the API docs (there is no public site).
admin.site.site_header = admin.site.site_title = "Lucia Studio"
admin.site.index_title = "Operations"
admin.site.site_url = reverse_lazy("api-docs")

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("lucia_site.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("healthz/", healthz, name="healthz"),
    path("hooks/", include("lucia_site.webhooks.urls")),
]

handler404 = "lucia_site.error_pages.not_found"
handler500 = "lucia_site.error_pages.server_error"
