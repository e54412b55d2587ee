"""The address a request came from, as login throttling counts it.

Behind a reverse proxy REMOTE_ADDR is the proxy's, so every Studio login
would share one address and one attacker could lock a username out for
everybody. `LUCIA_CLIENT_IP_HEADER` names the header the proxy sets (e.g.
`HTTP_X_FORWARDED_FOR`); its right-most entry is the one that proxy added,
the only one a client cannot forge.
"""

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    header = settings.LUCIA_CLIENT_IP_HEADER
    if header:
        forwarded = request.META.get(header, "").split(",")[-1].strip()
        if forwarded:
            return forwarded
    return request.META.get("REMOTE_ADDR", "")
