"""`/healthz/`: is the database answering, and when did a worker last beat."""

from django.db import connection
from django.http import JsonResponse


def healthz(request):
    checks = {"database": _database_status(), "worker": _worker_status()}
    healthy = checks["database"] == "ok"
    return JsonResponse({"status": "ok" if healthy else "error", "checks": checks}, status=200 if healthy else 503)


def _database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means the database is not usable
        return f"error: {exc.__class__.__name__}"
    return "ok"


def _worker_status() -> str:
    try:
        from django_q.status import Stat

        stats = Stat.get_all()
    except Exception as exc:  # the broker lives in the database, which may be down
        return f"unknown: {exc.__class__.__name__}"
    return f"ok: {len(stats)} cluster(s)" if stats else "no cluster running"
