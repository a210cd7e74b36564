#!/usr/bin/env python3
"""A `roamkv bench steady` run in 300 s windows of its measured phase, per engine, from its
timeseries.csv: the mean rate, space, log, the lower tier's dead bytes, the worker's resident
memory, device traffic and the state lock's longest hold, as a Markdown table (the tables of
docs/BENCHMARKS.md's long runs).

    scripts/steady-windows.py docs/bench/long-1800-final/timeseries.csv
"""
import collections
import csv
import sys

WINDOW_S = 300


def main(path):
    runs = collections.defaultdict(list)
    for row in csv.DictReader(open(path)):
        if row["phase"] == "measure":
            runs[row["engine"]].append(row)
    for engine, rows in runs.items():
        start = float(rows[0]["t_s"])
        windows = collections.defaultdict(list)
        for row in rows:
            windows[int((float(row["t_s"]) - start) // WINDOW_S)].append(row)
        print(f"\n{engine}")
        print("| seconds | ops/s | space mean / max GB | log GB | lower-tier dead max GB "
              "| worker RSS max MiB | device write / read MB/s | lock hold max ms |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for w in sorted(windows):
            ws = windows[w]

            def col(name):
                return [float(r[name]) for r in ws]

            def mean(name):
                return sum(col(name)) / len(ws)

            print(
                f"| {w * WINDOW_S}-{(w + 1) * WINDOW_S} | {mean('ops_per_sec'):,.0f} "
                f"| {mean('space_bytes') / 1e9:.2f} / {max(col('space_bytes')) / 1e9:.2f} "
                f"| {mean('log_bytes') / 1e9:.2f} | {max(col('lower_dead_bytes')) / 1e9:.3f} "
                f"| {max(col('rss_bytes')) / 2**20:.0f} "
                f"| {mean('device_write_bytes_per_sec') / 1e6:.0f} / "
                f"{mean('device_read_bytes_per_sec') / 1e6:.0f} "
                f"| {max(col('lock_hold_max_us')) / 1e3:.1f} |"
            )


if __name__ == "__main__":
    main(sys.argv[1])
