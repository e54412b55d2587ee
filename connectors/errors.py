"""The one error type connectors raise; vendor errors map to it.

Three kinds of failure, and what the runtime does with each (runs.tool_executor):
- permanent: the same request can never succeed (opted out, invalid number,
  bad credentials): the send fails for good;
- nothing left the process, or the provider refused before taking it
  (connection refused, DNS failure, TLS handshake failure, 429): retried later
  with a backoff; no lookup is needed, the provider never saw it;
- outcome unknown: the request may have reached the provider (timeout after
  connecting, connection reset after sending, 5xx, an unreadable answer):
  nothing is sent again before a lookup, after a settle window, says "not found".
"""

from __future__ import annotations

import socket
import ssl
import urllib.error

import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError


class ConnectorError(Exception):
    """A provider call failed.

    `permanent`: retrying the same message can never succeed (opted out, invalid
    number, bad credentials); the caller fails the send instead of retrying.
    `outcome_unknown`: the request may have reached the provider (timeout,
    dropped connection, 5xx), so the caller must `lookup` before sending again.
    Neither: the provider certainly did not take it; send again later.
    """

    def __init__(
        self, message: str, *, permanent: bool = False, code: str | None = None, outcome_unknown: bool = False
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.code = code
        self.outcome_unknown = outcome_unknown

    def __repr__(self) -> str:
        return (f"ConnectorError({str(self)!r}, permanent={self.permanent}, code={self.code!r}, "
                f"outcome_unknown={self.outcome_unknown})")


def transport_error(exc: BaseException, *, provider: str) -> ConnectorError:
    """A failure with no HTTP answer, as ConnectorError: outcome unknown unless nothing can have left."""
    if never_sent(exc):
        return ConnectorError(f"{provider} unreachable: {exc}", code="unreachable")
    return ConnectorError(f"{provider} request failed: {exc}", code="no_answer", outcome_unknown=True)


def never_sent(exc: BaseException) -> bool:
    """True only when the request certainly never reached the provider: the connection was never made
    (refused, DNS, connect timeout) or its TLS handshake failed, both before a byte of the request was written.

    requests (urllib3) and urllib (slack_sdk) report these differently; anything else (a read timeout, a
    connection reset or closed after the request went out) may have been processed.
    """
    if isinstance(exc, requests.exceptions.ConnectTimeout | requests.exceptions.SSLError):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError):
        reason = exc.args[0] if exc.args else None
        if isinstance(reason, MaxRetryError):
            reason = reason.reason
        # NewConnectionError covers refused, unreachable and DNS failures (NameResolutionError is one).
        return isinstance(reason, NewConnectionError)
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        # urllib wraps only errors raised while connecting and writing; its handshake errors are ssl.SSLError.
        return isinstance(exc.reason, ConnectionRefusedError | socket.gaierror | ssl.SSLError)
    return isinstance(exc, ConnectionRefusedError | socket.gaierror)
