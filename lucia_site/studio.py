"""The Studio's admin site: the dashboard is its landing page; the stock app list moves to `apps/`.

Installed through StudioAdminConfig (INSTALLED_APPS), so every `admin.register`
and `admin.site` keeps pointing at this one site.
"""

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse
from django.urls import path


class StudioSite(admin.AdminSite):
    def get_urls(self):
        return [path("apps/", self.admin_view(self.app_index_all), name="apps")] + super().get_urls()

    def index(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        # Imported on use: this module loads with the app registry, before models can be imported.
        from lucia_site import dashboard

        return dashboard.render(request, site=self)

    def app_index_all(self, request: HttpRequest) -> HttpResponse:
        """Every app and model the user may reach (the stock admin index)."""
        return super().index(request, extra_context={"title": "All apps"})


class StudioAdminConfig(AdminConfig):
    default_site = "lucia_site.studio.StudioSite"
