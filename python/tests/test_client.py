"""The Python client against a real ``roamkv serve``: round trips read back by pyarrow and
compared value by value with the server's JSON pages, EdgeX readings' numeric columns, every
export format, and the exceptions of each refusal."""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid

import pandas as pd
import pyarrow.parquet as pq
import pytest
import requests

import roamkv
from conftest import TOKEN

T0 = 1_700_000_000_000_000_000


def json_pages(server, device):
    """Every reading of a device through the native scan's JSON pages (the slow path)."""
    out, after = [], None
    headers = {"Authorization": f"Bearer {TOKEN}"}
    while True:
        params = {"limit": 10000}
        if after:
            params["after"] = after
        page = requests.get(f"{server.url}/api/roamkv/v1/devices/{device}/readings",
                            params=params, headers=headers, timeout=30).json()
        out.extend(page["readings"])
        after = page.get("next")
        if not after:
            return out


def raw_value(reading):
    if "value" in reading:
        return reading["value"].encode()
    return base64.b64decode(reading["value_b64"])


@pytest.fixture(scope="module")
def fleet(server):
    client = roamkv.Client(server.url, token=TOKEN)
    readings = []
    for d in range(3):
        for s in ("speed", "temp"):
            for i in range(2500):
                readings.append({"device": f"py-car-{d}", "sensor": s, "ts": T0 + i * 1000,
                                 "value": f"{d}.{s}.{i}"})
    readings.append({"device": "py-car-0", "sensor": "blob", "ts": T0, "value": b"\xff\x00\x01"})
    assert client.put(readings) == len(readings)
    return [f"py-car-{d}" for d in range(3)]


def test_scan_reads_back_what_the_json_pages_hold(server, client, fleet):
    frame = client.scan(fleet)
    assert isinstance(frame, pd.DataFrame)
    expected = [r for d in fleet for r in json_pages(server, d)]
    assert len(frame) == len(expected) == 3 * 2 * 2500 + 1
    for row, r in zip(frame.itertuples(index=False), expected):
        assert (row.device, row.sensor, row.ts.value) == (r["device"], r["sensor"], r["ts_ns"])
        assert row.value == raw_value(r)
    table = client.scan("py-car-1", sensor="temp", start=T0 + 1000, end=T0 + 5000, as_arrow=True)
    assert table.column("ts").to_pylist()[0].value == T0 + 1000
    assert table.num_rows == 4
    assert str(table.schema.field("ts").type) == "timestamp[ns, tz=UTC]"


def test_parquet_export_reads_back_value_by_value(server, client, fleet, tmp_path):
    path = client.export(tmp_path / "fleet.parquet", devices=fleet)
    table = pq.read_table(path)
    meta = pq.read_metadata(path).metadata
    assert meta[b"roamkv.exact"] == b"true"
    expected = [r for d in fleet for r in json_pages(server, d)]
    got = table.to_pylist()
    assert len(got) == len(expected)
    for g, r in zip(got, expected):
        assert (g["device"], g["sensor"], g["ts"].value) == (r["device"], r["sensor"], r["ts_ns"])
        assert g["value"] == raw_value(r)
        assert g["value_text"] == r.get("value")


def test_every_format_streams_to_a_file(server, client, fleet, tmp_path):
    csv = pd.read_csv(client.export(tmp_path / "a.csv", devices="py-car-2"))
    assert list(csv.columns[:4]) == ["device", "sensor", "ts", "ts_ns"]
    assert len(csv) == 5000
    lines = open(client.export(tmp_path / "a.jsonl", devices="py-car-2")).read().splitlines()
    assert [json.loads(line) for line in lines] == json_pages(server, "py-car-2")
    arrow = client.export(tmp_path / "a.arrows", devices="py-car-2")
    import pyarrow.ipc as ipc
    assert ipc.open_stream(open(arrow, "rb")).read_all().num_rows == 5000
    with pytest.raises(FileExistsError):
        client.export(tmp_path / "a.csv")


def test_edgex_readings_get_their_numbers(server, client):
    event_id = str(uuid.uuid4())
    origin = T0 + 42
    readings = [
        {"origin": origin, "deviceName": "py-thermo", "resourceName": r, "profileName": "p",
         "valueType": t, "value": v, "units": "C"}
        for r, t, v in [("temp", "Float64", "21.5"), ("count", "Int32", "-7"),
                        ("total", "Uint64", "18446744073709551615"), ("label", "String", "ok")]
    ]
    event = {"apiVersion": "v3", "event": {"id": event_id, "deviceName": "py-thermo",
             "profileName": "p", "sourceName": "s", "origin": origin, "readings": readings}}
    answer = requests.post(f"{server.url}/api/v3/event/svc/p/py-thermo/s", json=event,
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert answer.status_code == 201, answer.text
    frame = client.scan("py-thermo").set_index("sensor")
    assert frame.loc["temp", "value_float"] == 21.5
    assert frame.loc["count", "value_int"] == -7
    assert int(frame.loc["total", "value_uint"]) == 2**64 - 1
    assert frame.loc["label", "value_text"] == "ok"
    assert frame.loc["label", "value_type"] == "String"
    assert frame.loc["temp", "units"] == "C"
    assert pd.isna(frame.loc["label", "value_float"])


def test_devices_latest_and_depart(client):
    client.put([{"device": "py-leaver", "sensor": "s", "ts": dt.datetime(2024, 1, 1), "value": "a"},
                {"device": "py-leaver", "sensor": "s", "ts": pd.Timestamp("2024-01-02", tz="UTC"),
                 "value": "b"}])
    names = [d["device"] for d in client.devices()]
    assert "py-leaver" in names
    latest = client.latest("py-leaver")
    assert [(r["sensor"], r["value"]) for r in latest] == [("s", "b")]
    assert latest[0]["ts_ns"] == pd.Timestamp("2024-01-02", tz="UTC").value
    client.depart("py-leaver")
    assert "py-leaver" not in [d["device"] for d in client.devices()]
    with pytest.raises(roamkv.NotFound):
        client.scan("py-leaver")


def test_each_refusal_raises_its_exception(server, client, fleet):
    with pytest.raises(roamkv.NotFound) as e:
        client.scan(["py-car-0", "no-such-device"])
    assert "no-such-device" in e.value.message and e.value.status == 404
    with pytest.raises(roamkv.BadRequest, match="empty"):
        client.scan(start=T0 + 10, end=T0)
    with pytest.raises(roamkv.BadRequest, match="format"):
        client.export("never-written.xml", format="xml")
    with pytest.raises(roamkv.Unauthorized):
        roamkv.Client(server.url, token="wrong-token-wrong-token").devices()
    with pytest.raises(roamkv.ConnectionFailed):
        roamkv.Client("http://127.0.0.1:1", timeout=2).devices()
    with pytest.raises(TypeError):
        client.put([{"device": "d", "sensor": "s", "ts": 1, "value": 1.5}])
