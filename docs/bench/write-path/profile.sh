#!/usr/bin/env bash
# Off-CPU profile of the single writer's worker, log-only: perf sched_switch with stacks, 15 s of
# the measured phase. Usage: profile.sh BINARY OUT
set -euo pipefail
bin=$1; out=$2; mkdir -p "$out"
"$bin" bench steady --engines roamkv --depart-probability 1.0 --threads 1 --seconds 45 --warmup-seconds 30 --out "$out/steady" > "$out/steady.log" 2>&1 &
steady=$!
until pid=$(pgrep -f "$bin bench worker" | head -1); do sleep 1; done
sleep 40   # past the 30 s warm-up
perf record -e sched:sched_switch -g -p "$pid" -o "$out/perf.data" -- sleep 15 2> "$out/perf-record.log"
wait $steady || true
perf script -i "$out/perf.data" 2>/dev/null > "$out/script.txt"
python3 - "$out/script.txt" > "$out/summary.txt" <<'PY'
import sys, collections
events = open(sys.argv[1]).read().split("\n\n")
events = [e for e in events if "sched:sched_switch" in e]
total = len(events)
read_first = sum(1 for e in events if "ext4_block_write_begin" in e)
in_pwritev = sum(1 for e in events if "pwritev" in e or "do_pwritev" in e)
fsync = sum(1 for e in events if "fdatasync" in e or "do_fsync" in e)
print(f"context switches of the worker in 15 s: {total}")
print(f"  blocked in ext4_block_write_begin (a read before the write): {read_first} ({100*read_first/max(total,1):.1f} %)")
print(f"  any stack through pwritev: {in_pwritev} ({100*in_pwritev/max(total,1):.1f} %)")
print(f"  in fdatasync: {fsync}")
leaf = collections.Counter()
for e in events:
    lines = [l.strip() for l in e.splitlines()[1:] if l.strip()]
    # the first frame below the scheduler's own
    for l in lines:
        name = l.split()[1] if len(l.split()) > 1 else l
        if not any(k in name for k in ("schedule", "__traceiter", "__schedule", "preempt", "io_schedule", "bit_wait", "out_of_line_wait")):
            leaf[name.split("+")[0]] += 1
            break
print("top frames where the worker left the CPU:")
for name, n in leaf.most_common(8):
    print(f"  {n:7d} {100*n/max(total,1):5.1f} %  {name}")
PY
cat "$out/summary.txt"
grep "completed" "$out/steady.log" | cut -c1-120
