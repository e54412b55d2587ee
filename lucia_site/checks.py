"""System checks for missing or contradictory configuration (ids lucia.E/W0xx)."""

from pathlib import Path

from django.conf import settings
from django.core.checks import Error, Warning, register


@register()
def check_configuration(app_configs, **kwargs) -> list:
    problems = []
    if not settings.DEBUG and settings.SECRET_KEY == settings.INSECURE_SECRET_KEY:
        problems.append(Error(
            "DJANGO_SECRET_KEY is unset while DJANGO_DEBUG is off.",
            hint="Set DJANGO_SECRET_KEY to a long random value (or DJANGO_DEBUG=true for development).",
            id="lucia.E001",
        ))
    if settings.LUCIA_LLM not in {"scripted", "openai"}:
        problems.append(Error(
            f"LUCIA_LLM={settings.LUCIA_LLM!r} is not a known model provider.",
            hint="Use LUCIA_LLM=scripted (offline) or LUCIA_LLM=openai.",
            id="lucia.E002",
        ))
    if settings.LUCIA_LLM == "openai" and not settings.OPENAI_API_KEY:
        problems.append(Error(
            "LUCIA_LLM=openai but OPENAI_API_KEY is unset.",
            hint="Set OPENAI_API_KEY (any value for a local OpenAI-compatible server at OPENAI_BASE_URL).",
            id="lucia.E003",
        ))
    if settings.LUCIA_GUARDRAIL_MODEL and settings.LUCIA_LLM != "openai":
        problems.append(Warning(
            "LUCIA_GUARDRAIL_MODEL is set but LUCIA_LLM is not openai; only deterministic guardrails run.",
            hint="Set LUCIA_LLM=openai or unset LUCIA_GUARDRAIL_MODEL.",
            id="lucia.W001",
        ))
    if not settings.LUCIA_SECRETS_KEY and not settings.DEBUG:
        problems.append(Warning(
            "LUCIA_SECRETS_KEY is unset: identity secrets are encrypted with a key derived from DJANGO_SECRET_KEY.",
            hint="Set LUCIA_SECRETS_KEY so rotating DJANGO_SECRET_KEY does not make stored secrets unreadable.",
            id="lucia.W002",
        ))
    if settings.LUCIA_HEARTBEAT_SECONDS * 2 >= settings.LUCIA_LEASE_SECONDS:
        problems.append(Error(
            "LUCIA_HEARTBEAT_SECONDS must be well below LUCIA_LEASE_SECONDS (at most half).",
            hint="Keep the defaults (30 s heartbeat, 90 s lease) or scale them together.",
            id="lucia.E004",
        ))
    if settings.LUCIA_MODEL_TIMEOUT_S >= settings.LUCIA_LEASE_SECONDS:
        problems.append(Error(
            "LUCIA_MODEL_TIMEOUT_S must be below LUCIA_LEASE_SECONDS.",
            hint="A model call must finish before the lease it runs under expires.",
            id="lucia.E005",
        ))
    return problems


@register()
def check_static_files(app_configs, **kwargs) -> list:
    """With DEBUG off and the finders off, WhiteNoise serves only what collectstatic put in STATIC_ROOT."""
    if settings.DEBUG or settings.WHITENOISE_USE_FINDERS:
        return []
    if (Path(settings.STATIC_ROOT) / "admin" / "css" / "base.css").is_file():
        return []
    # A warning, not an error: `migrate` runs every check and comes before collectstatic in a deployment.
    return [Warning(
        f"LUCIA_STATIC_FINDERS is off and {settings.STATIC_ROOT} holds no collected static files: "
        "the Studio would be unstyled.",
        hint="Run `python manage.py collectstatic --no-input` as part of the deployment "
             "(or set LUCIA_STATIC_FINDERS=true).",
        id="lucia.W011",
    )]
