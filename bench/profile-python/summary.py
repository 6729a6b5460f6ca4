#!/usr/bin/env python3
"""Prints the table of a run.sh output directory: one line a run, then the ratios."""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
runs = []
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    with open(path) as f:
        r = json.load(f)
    if "reads_per_s" in r:
        runs.append((os.path.basename(path)[:-5], r))
print("| run | reads/s | hit ratio | hit p50 / p99 / p99.9 ms | miss p50 / p99 / p99.9 ms | load before → after |")
print("|---|---|---|---|---|---|")
for name, r in runs:
    lat = lambda k: " / ".join(str(r[k].get(q, "-")) for q in ("p50_ms", "p99_ms", "p999_ms"))
    la = r.get("load_average") or {}
    load = "%s → %s" % ((la.get("before") or ["?"])[0], (la.get("after") or ["?"])[0])
    print(f"| {name} | {r['reads_per_s']:,} | {r['hit_ratio']:.4f} | {lat('hits')} | {lat('misses')} | {load} |")
ours = [r["reads_per_s"] for n, r in runs if n.startswith("hourglass-")]
for mode in ("async", "sync"):
    peer = [r["reads_per_s"] for n, r in runs if n.startswith(f"python-{mode}-")]
    if ours and peer:
        print(f"hourglass / python ({mode} backfill), median reads/s: "
              f"{statistics.median(ours) / statistics.median(peer):.2f}x")
