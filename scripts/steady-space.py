#!/usr/bin/env python3
"""Space figures of a `roamkv bench steady` run from its timeseries.csv, per engine, over the
measured phase: the trends of bytes on disk and of the lower tier over the last 20 minutes
(least-squares slopes), the lower tier's most dead bytes, the seconds over its bound (limits.rs:
files over 1.5 x live with over 64 MiB dead) and what consolidation rewrote.

    scripts/steady-space.py out/space/timeseries.csv
"""
import collections
import csv
import sys

DEAD_BYTES_MIN = 64 * 2**20  # limits.rs WINDOW_DEAD_BYTES_MIN
AMPLIFICATION_PERCENT_MAX = 150  # limits.rs WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX
LAST_SECONDS = 1200


def slope(points):
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main(path):
    runs = collections.defaultdict(list)
    for row in csv.DictReader(open(path)):
        if row["phase"] == "measure":
            runs[row["engine"]].append(row)
    for engine, rows in runs.items():
        end = float(rows[-1]["t_s"])
        last = [r for r in rows if float(r["t_s"]) >= end - LAST_SECONDS]
        trend = lambda col: slope([(float(r["t_s"]), float(r[col])) for r in last]) * 60 / 1e6
        live = lambda r: int(r["lower_live_bytes"])
        dead = lambda r: int(r["lower_dead_bytes"])
        over = sum(
            1 for r in rows
            if dead(r) > DEAD_BYTES_MIN
            and (live(r) + dead(r)) * 100 > live(r) * AMPLIFICATION_PERCENT_MAX
        )
        rewritten = sum(float(r["consolidation_write_bytes_per_sec"]) for r in rows)
        compacted = sum(float(r["compaction_write_bytes_per_sec"]) for r in rows)
        print(
            f"{engine}: {len(rows)} s measured; last {LAST_SECONDS // 60} min: disk "
            f"{trend('space_bytes'):+.1f} MB/min, lower tier {trend('lower_bytes'):+.1f} MB/min; "
            f"lower tier dead max {max(map(dead, rows)) / 1e6:.0f} MB, live max "
            f"{max(map(live, rows)) / 1e6:.0f} MB, {over} s over its bound; consolidation "
            f"rewrote {rewritten / 1e9:.2f} GB, compaction {compacted / 1e9:.3f} GB"
        )


if __name__ == "__main__":
    main(sys.argv[1])
