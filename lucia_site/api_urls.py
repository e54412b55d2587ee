"""Every `/api/v1/` route, gathered from the apps' routers."""

from rest_framework.routers import DefaultRouter

router = DefaultRouter()
urlpatterns = router.urls
