"""The one error type connectors raise; vendor errors map to it."""


class ConnectorError(Exception):
    """A provider call failed.

    `permanent`: retrying the same message can never succeed (opted out, invalid
    number, bad credentials); the caller fails the send instead of retrying.
    `outcome_unknown`: the request may have reached the provider (timeout,
    dropped connection, 5xx), so the caller must `lookup` before sending again.
    """

    def __init__(
        self, message: str, *, permanent: bool = False, code: str | None = None, outcome_unknown: bool = False
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.code = code
        self.outcome_unknown = outcome_unknown

    def __repr__(self) -> str:
        return f"ConnectorError({str(self)!r}, permanent={self.permanent}, code={self.code!r})"
