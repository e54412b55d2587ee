"""`/healthz/`: the runtime's progress report (runs.health) as JSON; 503 with the reasons when unhealthy."""

from django.core.serializers.json import DjangoJSONEncoder
from django.http import JsonResponse

from runs import health


def healthz(request):
    report = health.report()
    body = {"status": "ok" if report.healthy else "error", "problems": report.problems,
            "checks": report.as_dict()}
    return JsonResponse(body, status=200 if report.healthy else 503, encoder=DjangoJSONEncoder)
