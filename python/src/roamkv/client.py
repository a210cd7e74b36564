"""The client of a running ``roamkv serve`` (its native API, ``/api/roamkv/v1``).

Reads of many readings (``scan``, ``export``) go through the server's export route: an Arrow IPC
stream read into a pyarrow Table as it arrives (no JSON on the hot path), or a file streamed to
disk. The server's OpenAPI document (``/api/roamkv/v1/openapi.json``) describes every route.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union
from urllib.parse import quote

import pyarrow as pa
import pyarrow.ipc as ipc
import requests

from .errors import ConnectionFailed, RoamkvError, error_for

#: What a time argument may be: nanoseconds since the epoch (int), a ``datetime`` (naive ones
#: are taken as UTC), a ``pandas.Timestamp``, or a string the server parses (RFC 3339, a
#: relative time such as ``"-1h"``, or epoch milliseconds).
TimeArg = Union[int, str, _dt.datetime, Any, None]

#: Devices to read: one name, several, or None for every device.
Devices = Union[str, Sequence[str], None]

#: Readings ``put`` sends in one request (one engine batch, atomic).
PUT_BATCH_READINGS = 5000

#: What ``export`` reads from the socket at a time.
CHUNK_BYTES = 1 << 20

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_FORMATS = {"parquet": "parquet", "arrows": "arrow", "arrow": "arrow", "csv": "csv", "jsonl": "jsonl"}


def _ns(value: Any) -> Optional[int]:
    """Nanoseconds since the epoch of an int, a datetime or a pandas Timestamp; None for text."""
    if isinstance(value, bool):
        raise TypeError("a time is an int (ns), a datetime, a pandas Timestamp or a string")
    if isinstance(value, int):
        return value
    if type(value).__name__ == "Timestamp" and hasattr(value, "value"):
        stamp = value if value.tzinfo is not None else value.tz_localize("UTC")
        return int(stamp.value)
    if isinstance(value, _dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=_dt.timezone.utc)
        return (aware - _EPOCH) // _dt.timedelta(microseconds=1) * 1000
    if isinstance(value, str):
        return None
    raise TypeError(f"not a time: {value!r}")


def _time_params(name: str, value: TimeArg) -> Dict[str, str]:
    if value is None:
        return {}
    ns = _ns(value)
    return {name: value} if ns is None else {f"{name}_ns": str(ns)}


class Client:
    """A roamkv server.

    >>> client = Client("http://127.0.0.1:59880", token=None)
    >>> client.scan("car-17", start="-1h")          # doctest: +SKIP

    ``token``: the bearer token (``--auth-token-file``, or the read-only one for reads).
    ``verify``: for HTTPS, a CA bundle's path (``--tls-cert`` signed by it) or True for the
    system's CAs. ``timeout``: seconds to connect and between bytes of an answer.
    """

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        verify: Union[bool, str] = True,
        timeout: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.verify = verify
        if token is not None:
            self._session.headers["Authorization"] = f"Bearer {token}"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the HTTP exchange ----------------------------------------------------------------

    def _request(self, method: str, path: str, stream: bool = False, **kwargs: Any) -> requests.Response:
        url = f"{self.url}/api/roamkv/v1{path}"
        try:
            answer = self._session.request(method, url, timeout=self.timeout, stream=stream, **kwargs)
        except requests.RequestException as e:
            raise ConnectionFailed(str(e), None, url) from e
        if answer.status_code >= 400:
            try:
                message = answer.json().get("message", answer.text)
            except ValueError:
                message = answer.text
            answer.close()
            raise error_for(answer.status_code, message, url)
        return answer

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    @staticmethod
    def _export_params(
        devices: Devices, sensor: Optional[str], start: TimeArg, end: TimeArg, fmt: str
    ) -> List[tuple]:
        names = [devices] if isinstance(devices, str) else list(devices or [])
        params: List[tuple] = [("device", name) for name in names]
        if sensor is not None:
            params.append(("sensor", sensor))
        params.extend(_time_params("start", start).items())
        params.extend(_time_params("end", end).items())
        params.append(("format", fmt))
        return params

    # -- reads ----------------------------------------------------------------------------

    def devices(self) -> List[Dict[str, Any]]:
        """Every device here: ``device`` (its name), ``tier`` (upper or lower), ``registered_at_ms``,
        ``age_ms``, ``log_readings``, ``lower_runs``."""
        return self._json("GET", "/devices")["devices"]

    def latest(self, device: str, sensor: Optional[str] = None) -> List[Dict[str, Any]]:
        """The newest reading of each sensor of ``device`` (of ``sensor`` only, if given), as the
        server's JSON shows readings (``device``, ``sensor``, ``ts_ns``, ``ts``, and ``value``,
        ``value_b64`` or ``edgex``). An unknown device has none."""
        params = {"sensor": sensor} if sensor is not None else {}
        path = f"/devices/{quote(device, safe='')}/latest"
        return self._json("GET", path, params=params)["readings"]

    def scan(
        self,
        devices: Devices = None,
        sensor: Optional[str] = None,
        start: TimeArg = None,
        end: TimeArg = None,
        as_arrow: bool = False,
    ) -> Any:
        """Readings of ``devices`` (one name, several, or None for all) with start <= ts < end,
        in (device, sensor, ts) order: a pandas DataFrame, or a pyarrow Table with
        ``as_arrow=True``. Columns: ``device``, ``sensor``, ``ts`` (UTC, ns), ``value`` (bytes),
        ``value_type``, ``value_text``, ``value_int``, ``value_uint``, ``value_float``,
        ``units`` (docs/SERVER.md, "Export"). Raises ``NotFound`` for a device not here."""
        params = self._export_params(devices, sensor, start, end, "arrow")
        answer = self._request("GET", "/export", stream=True, params=params)
        try:
            table = ipc.open_stream(answer.raw).read_all()
        except (pa.ArrowException, OSError, requests.RequestException) as e:
            raise ConnectionFailed(f"the export was cut: {e}", None, answer.url) from e
        finally:
            answer.close()
        return table if as_arrow else _to_pandas(table)

    def stats(self) -> Dict[str, Any]:
        """The engine's statistics (what ``roamkv stats --json`` prints)."""
        return self._json("GET", "/stats")

    def export(
        self,
        path: Union[str, os.PathLike],
        devices: Devices = None,
        sensor: Optional[str] = None,
        start: TimeArg = None,
        end: TimeArg = None,
        format: Optional[str] = None,
    ) -> str:
        """Streams an export to ``path`` (never over an existing file): Parquet unless
        ``format`` (``parquet``, ``arrow``, ``csv``, ``jsonl``) or the file's extension says
        otherwise. Written beside the file and renamed into place when whole. Returns the path."""
        path = os.fspath(path)
        if os.path.exists(path):
            raise FileExistsError(f"{path} exists: an export never overwrites a file")
        extension = os.path.splitext(path)[1].lstrip(".")
        fmt = format or _FORMATS.get(extension, "parquet")
        params = self._export_params(devices, sensor, start, end, fmt)
        partial = f"{path}.partial-{os.getpid()}"
        answer = self._request("GET", "/export", stream=True, params=params)
        try:
            with open(partial, "wb") as out:
                for chunk in answer.iter_content(CHUNK_BYTES):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
        except requests.RequestException as e:
            raise ConnectionFailed(f"the export was cut: {e}", None, answer.url) from e
        finally:
            answer.close()
            if os.path.exists(partial):
                os.remove(partial)
        return path

    # -- writes ---------------------------------------------------------------------------

    def put(self, readings: Union[Iterable[Mapping[str, Any]], Any]) -> int:
        """Writes readings: dicts with ``device``, ``sensor``, ``ts`` (a time, as for ``scan``)
        and ``value`` (str or bytes), or a pandas DataFrame with those columns. Sent in batches
        of ``PUT_BATCH_READINGS``, each written atomically and durably before the next. Returns
        the number written."""
        if hasattr(readings, "to_dict") and hasattr(readings, "columns"):
            readings = readings.to_dict("records")
        written = 0
        batch: List[str] = []
        for reading in readings:
            batch.append(_line(reading))
            if len(batch) == PUT_BATCH_READINGS:
                written += self._put_lines(batch)
                batch = []
        if batch:
            written += self._put_lines(batch)
        return written

    def _put_lines(self, lines: List[str]) -> int:
        body = "\n".join(lines).encode()
        return int(self._json("POST", "/readings", data=body)["written"])

    def depart(self, device: str) -> Dict[str, Any]:
        """The device departs this edge: its readings are dropped (or, with the server's
        ``--on-depart cloud``, handed to the cloud sink first: the answer says so)."""
        return self._json("DELETE", f"/devices/{quote(device, safe='')}")


def _to_pandas(table: pa.Table) -> Any:
    """The table as a DataFrame whose integer columns stay exact where they hold nulls (pandas'
    nullable Int64 and UInt64, not float64, which would round a uint64 past 2**53)."""
    import pandas as pd

    exact = {pa.int64(): pd.Int64Dtype(), pa.uint64(): pd.UInt64Dtype()}
    return table.to_pandas(types_mapper=exact.get)


def _line(reading: Mapping[str, Any]) -> str:
    try:
        device, sensor, ts, value = (reading[k] for k in ("device", "sensor", "ts", "value"))
    except KeyError as e:
        raise ValueError(f"a reading needs device, sensor, ts and value: {reading!r}") from e
    line: Dict[str, Any] = {"device": device, "sensor": sensor}
    ns = _ns(ts)
    if ns is None:
        line["ts"] = ts
    else:
        line["ts_ns"] = ns
    if isinstance(value, (bytes, bytearray, memoryview)):
        line["value_b64"] = base64.b64encode(bytes(value)).decode()
    elif isinstance(value, str):
        line["value"] = value
    else:
        raise TypeError(f"a value is str or bytes, not {type(value).__name__}: {reading!r}")
    return json.dumps(line)


__all__ = ["Client", "RoamkvError", "TimeArg", "Devices"]
