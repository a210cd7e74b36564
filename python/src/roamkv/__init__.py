"""roamkv for Python: a client for ``roamkv serve`` that hands readings to pyarrow and pandas.

    import roamkv
    client = roamkv.Client("http://127.0.0.1:59880")
    frame = client.scan("car-17", start="-1h")
"""

from .client import PUT_BATCH_READINGS, Client, Devices, TimeArg
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InsufficientStorage,
    NotFound,
    PayloadTooLarge,
    RoamkvError,
    ServerError,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Devices",
    "TimeArg",
    "PUT_BATCH_READINGS",
    "RoamkvError",
    "ConnectionFailed",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "PayloadTooLarge",
    "TooManyRequests",
    "ServiceUnavailable",
    "InsufficientStorage",
    "ServerError",
]
