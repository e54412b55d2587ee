"""`/healthz/`: is the database answering, and when did the worker cluster last dispatch."""

from datetime import timedelta

from django.db import connection
from django.http import JsonResponse
from django.utils import timezone

# dispatch_due runs every minute; three missed beats mean no cluster is running it.
WORKER_STALE_AFTER = timedelta(minutes=3)


def healthz(request):
    database = _database_status()
    checks = {"database": database, "worker": _worker_status() if database == "ok" else "unknown"}
    healthy = database == "ok"
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
    from runs.tasks import last_dispatch_at

    last = last_dispatch_at()
    if last is None:
        return "no worker has run the dispatcher yet (start one with `python manage.py qcluster`)"
    if timezone.now() - last > WORKER_STALE_AFTER:
        return f"stale: the dispatcher last ran at {last.isoformat()}"
    return f"ok: the dispatcher last ran at {last.isoformat()}"
