"""``Client.scan`` (the Arrow export into pandas) against the same readings through the native
scan's JSON pages into pandas, on a running server: what ``roamkv bench export --python`` runs.

    python scan_vs_json.py URL DEVICE [DEVICE ...]      # prints one JSON line

Each is run ``REPEAT`` times; the medians are reported. Both end in a DataFrame of the same
readings (device, sensor, ts, value): checked before timing counts.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import pandas as pd
import requests

import roamkv

REPEAT = 3
PAGE = 10000


def through_json(url, devices):
    rows = []
    session = requests.Session()
    for device in devices:
        after = None
        while True:
            params = {"limit": PAGE}
            if after:
                params["after"] = after
            page = session.get(f"{url}/api/roamkv/v1/devices/{device}/readings",
                               params=params, timeout=300).json()
            rows.extend(page["readings"])
            after = page.get("next")
            if not after:
                break
    frame = pd.DataFrame.from_records(rows, columns=["device", "sensor", "ts_ns", "value"])
    frame["ts"] = pd.to_datetime(frame.pop("ts_ns"), unit="ns", utc=True)
    return frame


def main():
    url, devices = sys.argv[1], sys.argv[2:]
    client = roamkv.Client(url, timeout=300)
    arrow_s, json_s = [], []
    for _ in range(REPEAT):
        started = time.perf_counter()
        fast = client.scan(devices)
        arrow_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        slow = through_json(url, devices)
        json_s.append(time.perf_counter() - started)
    assert len(fast) == len(slow), (len(fast), len(slow))
    assert (fast["ts"].values == slow["ts"].values).all()
    assert list(fast["value_text"]) == list(slow["value"])
    print(json.dumps({
        "readings": len(fast),
        "arrow_seconds": statistics.median(arrow_s),
        "json_seconds": statistics.median(json_s),
        "arrow_runs": arrow_s,
        "json_runs": json_s,
    }))


if __name__ == "__main__":
    main()
