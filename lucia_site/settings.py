"""Lucia settings. Every value comes from the environment (see README, "Settings")."""

import sys
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from lucia_site.database import database_settings
from lucia_site.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", False)
# The insecure fallback only serves development: with DEBUG off the process refuses to start on it.
INSECURE_SECRET_KEY = "insecure-development-key-set-DJANGO_SECRET_KEY"  # noqa: S105
SECRET_KEY = env_str("DJANGO_SECRET_KEY", INSECURE_SECRET_KEY)
if not DEBUG and SECRET_KEY == INSECURE_SECRET_KEY:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is unset and DJANGO_DEBUG is off: refusing to start with the public development key. "
        "Set DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) to a long random value, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`, or set DJANGO_DEBUG=true for development."
    )
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "testserver"])

INSTALLED_APPS = [
    "lucia_site.studio.StudioAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_q",
    "anymail",
    "axes",
    "lucia_site",
    "agents",
    "connectors",
    "runs",
    "simulator",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The Studio's CSS and JS with DEBUG off: no web server in front is needed for them.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "lucia_site.untrusted_input.RefuseNulBytes",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as axes asks: it turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "lucia_site.urls"
WSGI_APPLICATION = "lucia_site.wsgi.application"
ASGI_APPLICATION = "lucia_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_settings()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Security (production defaults; DJANGO_DEBUG=true relaxes the HTTPS ones) -----------
SECURE_SSL_REDIRECT = env_bool("LUCIA_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("LUCIA_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("LUCIA_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("LUCIA_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("LUCIA_HSTS_PRELOAD", True)
# Behind a TLS-terminating proxy: "HTTP_X_FORWARDED_PROTO=https". Only set it when the proxy overwrites that header.
_proxy_ssl_header = env_str("LUCIA_PROXY_SSL_HEADER")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header.split("=", 1)) if _proxy_ssl_header else None
if SECURE_PROXY_SSL_HEADER is not None and len(SECURE_PROXY_SSL_HEADER) != 2:
    raise ImproperlyConfigured(
        f"LUCIA_PROXY_SSL_HEADER={_proxy_ssl_header!r} must look like HTTP_X_FORWARDED_PROTO=https."
    )
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Login throttling (django-axes): a username is locked out from one address after repeated failures;
# `manage.py axes_reset` (or the Studio's "Access attempts") unlocks. API keys do not log in and are unaffected.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LUCIA_LOGIN_FAILURE_LIMIT", 5)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LUCIA_LOGIN_LOCKOUT_MINUTES", 60)) or None
AXES_RESET_ON_SUCCESS = True
# No "AXES: BEGIN ..." banner on every manage.py command; a lockout's log line still names the username and address.
AXES_VERBOSE = False
# Behind a reverse proxy: the META name of the header it sets, e.g. HTTP_X_FORWARDED_FOR (right-most entry used).
LUCIA_CLIENT_IP_HEADER = env_str("LUCIA_CLIENT_IP_HEADER", "")
AXES_CLIENT_IP_CALLABLE = "lucia_site.client_address.client_address"

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Filled by `manage.py collectstatic` (make dev runs it; so must a deployment): gzip-compressed copies that
# WhiteNoise serves. Not a manifest storage: a page never fails for want of a collectstatic.
STATIC_ROOT = Path(env_str("LUCIA_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Also serve files straight from the apps (what collectstatic would copy), so the Studio is styled before any
# collectstatic (tests, a first start). Set LUCIA_STATIC_FINDERS=false once collectstatic is part of the deploy.
WHITENOISE_USE_FINDERS = env_bool("LUCIA_STATIC_FINDERS", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LUCIA_LOG_LEVEL", "INFO")},
}

# --- Lucia ---------------------------------------------------------------------
LUCIA_PUBLIC_URL = env_str("LUCIA_PUBLIC_URL", "http://localhost:8000")
LUCIA_INBOUND_DOMAIN = env_str("LUCIA_INBOUND_DOMAIN", "inbound.lucia.localhost")
# Webhooks whose provider signs a time (Mailgun, Slack) older than this are refused; 300-900 (check lucia.E007).
LUCIA_WEBHOOK_MAX_AGE_S = env_int("LUCIA_WEBHOOK_MAX_AGE_S", 300)
# The sandbox webhook (/hooks/sandbox/) answers only with DEBUG on or this set: its key is SECRET_KEY's.
LUCIA_SANDBOX_WEBHOOK = env_bool("LUCIA_SANDBOX_WEBHOOK", False)
LUCIA_LLM = env_str("LUCIA_LLM", "scripted")
LUCIA_MODEL = env_str("LUCIA_MODEL", "gpt-4o-mini")
LUCIA_GUARDRAIL_MODEL = env_str("LUCIA_GUARDRAIL_MODEL")
LUCIA_MODEL_TIMEOUT_S = env_int("LUCIA_MODEL_TIMEOUT_S", 30)
# A model that is down (429, 5xx, timeouts) postpones the episode (runs.model_outages): retried after a backoff
# doubling from the first value up to the second; an outage lasting the third opens one escalation per run.
LUCIA_MODEL_RETRY_SECONDS = env_int("LUCIA_MODEL_RETRY_SECONDS", 60)
LUCIA_MODEL_RETRY_MAX_SECONDS = env_int("LUCIA_MODEL_RETRY_MAX_SECONDS", 3600)
LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S = env_int("LUCIA_MODEL_OUTAGE_ESCALATE_AFTER_S", 6 * 3600)
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
LUCIA_SECRETS_KEY = env_str("LUCIA_SECRETS_KEY")
# Largest attachment whose bytes are kept (inbound email, events API); larger ones are never evidence.
LUCIA_ATTACHMENT_MAX_BYTES = env_int("LUCIA_ATTACHMENT_MAX_BYTES", 10 * 1024 * 1024)
# Names fault-injection points that end the process (tests and the chaos suite only).
LUCIA_FAULTS = env_list("LUCIA_FAULTS", [])
# Where `name:once` faults leave their marker, so a restarted worker runs through.
LUCIA_FAULTS_DIR = env_str("LUCIA_FAULTS_DIR", "")
LUCIA_LEASE_SECONDS = env_int("LUCIA_LEASE_SECONDS", 90)
LUCIA_HEARTBEAT_SECONDS = env_int("LUCIA_HEARTBEAT_SECONDS", 30)
LUCIA_EPISODE_MAX_ATTEMPTS = env_int("LUCIA_EPISODE_MAX_ATTEMPTS", 3)
LUCIA_SLICE_STEP_CAP = env_int("LUCIA_SLICE_STEP_CAP", 20)
# Sends under provider faults (runs.tool_executor): an attempt whose outcome is unknown is looked up only this
# long after it was made; a send the provider never got is retried after RETRY seconds, doubling up to MAX;
# a lookup the provider cannot answer for now is asked again up to LOOKUP_TRIES times, then a human decides.
LUCIA_SEND_SETTLE_SECONDS = env_int("LUCIA_SEND_SETTLE_SECONDS", 120)
LUCIA_SEND_RETRY_SECONDS = env_int("LUCIA_SEND_RETRY_SECONDS", 30)
LUCIA_SEND_RETRY_MAX_SECONDS = env_int("LUCIA_SEND_RETRY_MAX_SECONDS", 900)
LUCIA_SEND_LOOKUP_TRIES = env_int("LUCIA_SEND_LOOKUP_TRIES", 5)

# --- Workers: supervision and health (runs.supervisor, runs.health) ------------------
# Set by `runworkers` for its qcluster child; names the cluster's heartbeat row.
LUCIA_WORKER_CLUSTER = env_str("LUCIA_WORKER_CLUSTER")
# A cluster with work waiting this long and no task started or finished is restarted.
LUCIA_WORKER_STALL_AFTER = env_int("LUCIA_WORKER_STALL_AFTER", 60)
LUCIA_WORKER_CHECK_EVERY = env_int("LUCIA_WORKER_CHECK_EVERY", 5)
# The supervisor dispatches due episodes this often, so short follow-ups need not wait for the minute schedule.
LUCIA_DISPATCH_INTERVAL = env_int("LUCIA_DISPATCH_INTERVAL", 2)
# Idle workers wait for tasks without holding the task queue's lock (runs.qworkers; django-q2 issue #23).
LUCIA_Q_LOCK_FREE_WAIT = env_bool("LUCIA_Q_LOCK_FREE_WAIT", True)
# /healthz/ answers 503 past any of these (seconds).
LUCIA_HEALTH_MAX_DUE_LAG = env_int("LUCIA_HEALTH_MAX_DUE_LAG", 120)
LUCIA_HEALTH_MAX_QUEUE_AGE = env_int("LUCIA_HEALTH_MAX_QUEUE_AGE", 120)
LUCIA_HEALTH_MAX_IDLE = env_int("LUCIA_HEALTH_MAX_IDLE", 180)
LUCIA_HEALTH_MAX_EXPIRED_LEASE = env_int("LUCIA_HEALTH_MAX_EXPIRED_LEASE", 120)
# Failed episodes in the last hour above this count are unhealthy; 0 only reports them.
LUCIA_HEALTH_MAX_FAILED_LAST_HOUR = env_int("LUCIA_HEALTH_MAX_FAILED_LAST_HOUR", 0)

# Largest JSON request body the API reads (attachments may travel base64-encoded inside one).
LUCIA_MAX_JSON_BYTES = env_int("LUCIA_MAX_JSON_BYTES", 20 * 1024 * 1024)
# User-supplied patterns (done_when checks) scan at most this many characters of inbound text.
LUCIA_PATTERN_SCAN_CHARS = env_int("LUCIA_PATTERN_SCAN_CHARS", 20_000)

# --- Email (anymail) ------------------------------------------------------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "anymail.backends.test.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "lucia@localhost")
ANYMAIL = {
    key: value
    for key, value in {
        "WEBHOOK_SECRET": env_str("ANYMAIL_WEBHOOK_SECRET"),
        "POSTMARK_SERVER_TOKEN": env_str("ANYMAIL_POSTMARK_SERVER_TOKEN"),
        "MAILGUN_API_KEY": env_str("ANYMAIL_MAILGUN_API_KEY"),
        "MAILGUN_WEBHOOK_SIGNING_KEY": env_str("ANYMAIL_MAILGUN_WEBHOOK_SIGNING_KEY"),
    }.items()
    if value
}

# --- API ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "agents.api_auth.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["agents.api_auth.HasOrganization"],
    "DEFAULT_SCHEMA_CLASS": "lucia_site.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "lucia_site.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_PARSER_CLASSES": [
        "lucia_site.untrusted_input.JSONParser",
        "lucia_site.untrusted_input.FormParser",
        "lucia_site.untrusted_input.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Lucia API",
    "DESCRIPTION": "Start runs, feed events, read timelines, build and publish agents.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Several models have a `status`; without names spectacular invents "Status860Enum" and warns.
    "ENUM_NAME_OVERRIDES": {
        "VersionStatusEnum": "agents.models.VersionStatus",
        "RunStatusEnum": "runs.models.run.RunStatus",
        "TaskStatusEnum": "runs.models.run.TaskStatus",
        "EpisodeStatusEnum": "runs.models.episode.EpisodeStatus",
        "EscalationStatusEnum": "runs.models.escalation.EscalationStatus",
        "EventKindEnum": "runs.api.serializers.EVENT_KINDS",
    },
}

# --- Worker (django-q2, ORM broker on the same database) -----------------------------
Q_CLUSTER = {
    "name": "lucia",
    "orm": "default",
    # django-q2's ORM broker, taking the oldest waiting tasks in one statement (runs.queue_broker).
    "broker_class": "runs.queue_broker.SkipLockedORM",
    "workers": env_int("LUCIA_Q_WORKERS", 2),
    "timeout": env_int("LUCIA_Q_TIMEOUT", 300),
    "retry": env_int("LUCIA_Q_RETRY", 360),
    "max_attempts": env_int("LUCIA_Q_MAX_ATTEMPTS", 3),
    # The journal is the record: keeping successes locks the success table on
    # every result and cuts throughput about 4x. Failures are still kept.
    "save_limit": -1,
    "poll": 0.2,
    "catch_up": False,
    "ack_failures": True,
    # A worker process is replaced after `recycle` tasks, or sooner once its peak RSS passes `max_rss`. Its
    # successor starts cold (a new process's caches empty: plans parsed again, modules loaded on first use, a new
    # connection): with django-q2's default of 500, a 09:00 burst of 4,000 runs drained about 10% slower
    # (manage.py bench --only burst, 7 alternating pairs: 165 against 183 episodes/s, 6 pairs of 7 in this favour).
    # A worker grew about 1 MB per 1,000 tasks there; the RSS bound replaces one that grows faster.
    "recycle": env_int("LUCIA_Q_RECYCLE", 5000),
    # django-q2 compares it with getrusage's ru_maxrss: kilobytes on Linux, bytes on macOS.
    "max_rss": env_int("LUCIA_Q_MAX_RSS_KB", 512 * 1024) * (1024 if sys.platform == "darwin" else 1),
}
if Q_CLUSTER["timeout"] >= Q_CLUSTER["retry"]:
    raise ImproperlyConfigured(
        f"LUCIA_Q_TIMEOUT ({Q_CLUSTER['timeout']}) must be below LUCIA_Q_RETRY "
        f"({Q_CLUSTER['retry']}): otherwise a slow task is handed to a second worker while it still runs."
    )
