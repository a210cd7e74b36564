"""What a roamkv server's refusals raise: one exception per HTTP status a client handles apart."""

from __future__ import annotations

from typing import Optional


class RoamkvError(Exception):
    """A request the server refused, or that did not reach it.

    ``status`` is the HTTP status (None when the server was not reached), ``message`` the
    server's reason (its JSON ``message``), ``url`` what was asked.
    """

    def __init__(self, message: str, status: Optional[int] = None, url: str = "") -> None:
        super().__init__(f"{url}: {status}: {message}" if status else f"{url}: {message}")
        self.status = status
        self.message = message
        self.url = url


class ConnectionFailed(RoamkvError):
    """The server could not be reached, or cut the answer short (an export it could not finish)."""


class BadRequest(RoamkvError):
    """400: the request is malformed (an unknown format, an empty range, a bad name)."""


class Unauthorized(RoamkvError):
    """401: no token, or a wrong one (``Client(token=...)``)."""


class Forbidden(RoamkvError):
    """403: the read-only token was given for a write."""


class NotFound(RoamkvError):
    """404: no such device at this edge (or no such route)."""


class Conflict(RoamkvError):
    """409: the device is being handed off or is fenced."""


class PayloadTooLarge(RoamkvError):
    """413: a batch or a value over the server's limits."""


class TooManyRequests(RoamkvError):
    """429: the server's limit on requests in flight; retry later."""


class ServiceUnavailable(RoamkvError):
    """503: the server is shutting down or not ready."""


class InsufficientStorage(RoamkvError):
    """507: no room in the log's budget; nothing was written, a retry may succeed."""


class ServerError(RoamkvError):
    """Any other 5xx: the server failed (its log says why)."""


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: TooManyRequests,
    503: ServiceUnavailable,
    507: InsufficientStorage,
}


def error_for(status: int, message: str, url: str) -> RoamkvError:
    """The exception for an answer's status."""
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else RoamkvError)
    return kind(message, status, url)
