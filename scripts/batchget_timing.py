#!/usr/bin/env python3
"""Times `POST /api/v1/profiles:batchGet` of BATCH users on one or more `hourglass serve
--profile-config` servers, interleaved: each round draws BATCH ids of USERS (one a line) and
asks every server in turn (in an order that alternates between rounds), so that load on a
shared machine falls on all of them alike. Prints each server's median, p90 and worst time.

Usage: scripts/batchget_timing.py USERS ROUNDS BATCH NAME=URL [NAME=URL ...]
(docs/BENCHMARKS.md, "batchGet of 1,000 users", gives the whole command.)
"""

import json
import random
import statistics
import sys
import time
import urllib.request


def post(url: str, users: list) -> float:
    body = json.dumps({"users": users}).encode()
    req = urllib.request.Request(
        f"{url}/api/v1/profiles:batchGet",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        answer = json.load(r)
    took = (time.perf_counter() - started) * 1000
    assert len(answer["profiles"]) == len(users), answer
    return took


def main() -> None:
    users_file, rounds, batch, *servers = sys.argv[1:]
    users = [u for u in open(users_file).read().split("\n") if u]
    servers = [s.split("=", 1) for s in servers]
    rng = random.Random(37)
    times = {name: [] for name, _ in servers}
    for r in range(int(rounds) + 1):
        ask = rng.sample(users, int(batch))
        order = servers if r % 2 == 0 else servers[::-1]
        for name, url in order:
            took = post(url, ask)
            if r > 0:  # round 0 warms connections and region boundaries
                times[name].append(took)
    for name, t in times.items():
        t.sort()
        print(
            f"{name}: median {statistics.median(t):.1f} ms, "
            f"p90 {t[int(len(t) * 0.9) - 1]:.1f} ms, max {t[-1]:.1f} ms over {len(t)} batches"
        )


if __name__ == "__main__":
    main()
