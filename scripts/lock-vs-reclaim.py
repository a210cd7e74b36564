#!/usr/bin/env python3
"""Is the state lock's longest hold in a second the time a thread spent in memory reclaim?

Reads a tracefs dump of the vmscan events taken while `roamkv bench steady` ran, and the run's
timeseries.csv (a point per second with `lock_hold_max_us`), and prints: how long each direct
reclaim took (the memory cgroup's, by thread), and for every second whose longest hold passed
10 ms, the longest reclaim and each thread's reclaim time in the seconds around it, against the
same in the other seconds (docs/BENCHMARKS.md, "The long run on the final engine").

Taking the trace (root; tracefs at /sys/kernel/tracing), while the engine's run is measured:

    cd /sys/kernel/tracing && echo boot > trace_clock && echo 262144 > buffer_size_kb
    for e in memcg_reclaim_begin memcg_reclaim_end direct_reclaim_begin direct_reclaim_end \\
             throttled; do echo 1 > events/vmscan/mm_vmscan_$e/enable; done
    date +%s.%N > MAP; cut -d' ' -f1 /proc/uptime >> MAP      # the trace's clock against the wall's
    ... then, before the next engine starts: echo 0 > tracing_on; cat trace > TRACE

    scripts/lock-vs-reclaim.py TRACE timeseries.csv MAP ENGINE WORKER_START_EPOCH_S

WORKER_START_EPOCH_S is when the engine's `bench worker` process started (`ps -o lstart`); a
tick's second is known to about a second, so each second is compared with its neighbours too.
"""
import collections
import csv
import re
import statistics
import sys

HOLD_MS_LONG = 10.0
EVENT = re.compile(r"^\s*(.+?)-(\d+)\s+\[\d+\]\s+\S+\s+([\d.]+): (mm_vmscan_\w+): (.*)$")


def main():
    trace, series, map_file, engine, worker_start = sys.argv[1:6]
    wall, boot = [float(x) for x in open(map_file).read().split()[:2]]
    to_run_s = wall - boot - float(worker_start)  # a trace timestamp + this = seconds of the run

    began = {}
    durations = []
    by_thread = collections.Counter()
    ms_by_thread = collections.Counter()
    throttled = collections.Counter()
    throttled_ms = collections.Counter()
    longest = collections.defaultdict(float)  # second -> longest reclaim, ms
    thread_ms = collections.defaultdict(float)  # (second, thread name) -> reclaim ms
    for line in open(trace):
        m = EVENT.match(line)
        if not m:
            continue
        name = re.sub(r"\d+$", "", m.group(1).strip())
        pid, ts, event, rest = int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)
        if event == "mm_vmscan_throttled":
            throttled[name] += 1
            throttled_ms[name] += int(re.search(r"usect_delayed=(\d+)", rest).group(1)) / 1e3
        elif event.endswith("_begin"):
            began[pid] = ts
        elif pid in began:
            t0 = began.pop(pid)
            ms = (ts - t0) * 1e3
            durations.append(ms)
            by_thread[name] += 1
            ms_by_thread[name] += ms
            second = int(t0 + to_run_s)
            longest[second] = max(longest[second], ms)
            thread_ms[(second, name)] += ms

    durations.sort()
    n = len(durations)
    print(
        f"reclaims {n}: p50 {durations[n // 2]:.3f} ms, p99 {durations[int(n * .99)]:.3f}, "
        f"p99.9 {durations[int(n * .999)]:.2f}, max {durations[-1]:.1f}; "
        f"over 10 ms {sum(d > 10 for d in durations)}, over 5 ms {sum(d > 5 for d in durations)}"
    )
    for name, count in by_thread.most_common():
        print(f"  {name:20} {count:9} reclaims, {ms_by_thread[name] / 1e3:8.2f} s in reclaim")
    for name, count in throttled.most_common():
        print(f"  {name:20} {count:9} throttled on writeback, {throttled_ms[name] / 1e3:6.2f} s")

    lock = {
        int(float(r["t_s"])): float(r["lock_hold_max_us"]) / 1e3
        for r in csv.DictReader(open(series))
        if r["engine"] == engine
    }
    first, last = min(longest), max(longest)
    traced = [s for s in lock if first <= s <= last]
    long_holds = [s for s in traced if lock[s] > HOLD_MS_LONG]
    others = [s for s in traced if lock[s] <= HOLD_MS_LONG]

    def around(values, s):
        return max(values.get(t, 0.0) for t in (s - 1, s, s + 1))

    print(f"seconds traced {len(traced)} ({first}-{last} s of the run); "
          f"with a hold over {HOLD_MS_LONG:.0f} ms: {len(long_holds)}")
    for s in long_holds:
        print(f"  t={s:5d}  lock max {lock[s]:6.1f} ms   longest reclaim in t-1..t+1 "
              f"{around(longest, s):5.1f} ms")
    for label, seconds in (("long-hold seconds", long_holds), ("other seconds", others)):
        near = sum(around(longest, s) > HOLD_MS_LONG for s in seconds)
        print(f"{label}: a reclaim over {HOLD_MS_LONG:.0f} ms within a second: "
              f"{near} of {len(seconds)}")
    for name in [t for t, _ in by_thread.most_common(2)]:
        per_second = {s: v for (s, t), v in thread_ms.items() if t == name}
        in_long = statistics.median(around(per_second, s) for s in long_holds)
        in_other = statistics.median(around(per_second, s) for s in others)
        print(f"{name}: reclaim ms in the worst second of t-1..t+1, median: long-hold seconds "
              f"{in_long:.1f}, other seconds {in_other:.1f}")


if __name__ == "__main__":
    main()
