"""Every `/api/v1/` route, gathered from the apps' routers."""

from rest_framework.routers import DefaultRouter

from agents.api import urls as agents_api
from connectors import api as connectors_api
from runs.api import urls as runs_api
from simulator import api as simulator_api

router = DefaultRouter()
agents_api.register(router)
connectors_api.register(router)
runs_api.register(router)
simulator_api.register(router)
urlpatterns = router.urls
