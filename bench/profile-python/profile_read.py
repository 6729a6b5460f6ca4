#!/usr/bin/env python3
"""The documents' profile read path in Python, the peer of `hourglass bench profile`.

As the documents show it: happybase (HBase Thrift1 gateway) + redis-py.

    GET profile:{uid}  -> hit: the cached JSON
                       -> miss: table.row(<salt><uid>) on user_profile_tag, then the
                          backfill SET profile:{uid} <json> EX 600, either
                          --backfill sync   in the request (the anti-pattern), or
                          --backfill async  handed to a worker thread through a bounded queue
                                            (the request does not wait; a full queue drops it)

Same users (the file `hourglass bench profile --users-file` writes, hottest first), the same
discrete Zipf law over their ranks, the same cache fraction (only the hottest ranks are
cached, and their entries are filled before the timed reads), the same row key
(`jobs/profile/src/key.rs`: the first 4 lowercase hex digits of MD5(uid), then the uid).
Prints the same figures as JSON: reads/s, hit ratio, latencies of hits and misses apart.

Values are returned as the cell text (no typing by the tag registry), and only
`profile:{uid}` is read from Redis (hourglass also reads the user's generation in the same
MGET and its short-term hash `short-tags:{uid}` by an HGETALL in the same pipeline): both in
the peer's favour. The documents show no short-term read, so the peer has none.
"""

import argparse
import bisect
import hashlib
import itertools
import json
import os
import queue
import random
import sys
import threading
import time

import happybase
import redis

TABLE = "user_profile_tag"
TTL_SECS = 600


def row_key(uid):
    """`<salt><uid>`: the salt is the first 4 lowercase hex digits of MD5(uid)."""
    return (hashlib.md5(uid.encode()).hexdigest()[:4] + uid).encode()


def decode_row(row):
    """{tag code: value text} of a happybase row ({b'family:qualifier': b'value'})."""
    return {col.split(b":", 1)[1].decode(): val.decode() for col, val in row.items()}


class Zipf:
    """Rank r of 0..n-1 with probability (r+1)^-s / H(n, s), exactly, as the Rust bench."""

    def __init__(self, n, s):
        self.cum = list(itertools.accumulate(k ** -s for k in range(1, n + 1)))
        self.total = self.cum[-1]

    def draw(self, rng):
        return min(bisect.bisect_right(self.cum, rng.random() * self.total), len(self.cum) - 1)

    def mass_of_top(self, k):
        return self.cum[k - 1] / self.total if k else 0.0


class Backfill:
    """The asynchronous backfill: a bounded queue and one worker thread, as hourglass's."""

    def __init__(self, r, size=1024):
        self.r, self.q = r, queue.Queue(maxsize=size)
        self.written = self.dropped = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def put(self, key, text):
        try:
            self.q.put_nowait((key, text))
        except queue.Full:
            self.dropped += 1

    def _loop(self):
        while True:
            job = self.q.get()
            if job is None:
                return
            try:
                self.r.set(job[0], job[1], ex=TTL_SECS)
                self.written += 1
            except redis.RedisError:
                self.dropped += 1

    def finish(self):
        self.q.put(None)
        self.thread.join()


class Reader:
    def __init__(self, args, cacheable):
        self.pool = happybase.ConnectionPool(
            size=max(args.threads, 1), host=args.hbase_host, port=args.hbase_port
        )
        self.r = redis.Redis.from_url(args.redis_url)
        self.cacheable = cacheable
        self.backfill = Backfill(self.r) if args.backfill == "async" else None

    def store(self, key, profile):
        text = json.dumps(profile)
        if self.backfill:
            self.backfill.put(key, text)
        else:
            self.r.set(key, text, ex=TTL_SECS)

    def get(self, uid):
        """(profile, True if from the cache)."""
        key = "profile:" + uid
        cached = self.r.get(key)
        if cached is not None:
            return json.loads(cached), True
        with self.pool.connection() as conn:
            row = conn.table(TABLE).row(row_key(uid))
        profile = decode_row(row)
        if profile and uid in self.cacheable:
            self.store(key, profile)
        return profile, False

    def batch(self, uids):
        """(hits, misses) of one batch: one MGET, one multi-get (table.rows) of the misses."""
        keys = ["profile:" + u for u in uids]
        cached = self.r.mget(keys)
        missed = [u for u, c in zip(uids, cached) if c is None]
        for c in cached:
            if c is not None:
                json.loads(c)
        if missed:
            with self.pool.connection() as conn:
                rows = conn.table(TABLE).rows([row_key(u) for u in missed])
            for key, row in rows:
                uid = key.decode()[4:]
                profile = decode_row(row)
                if profile and uid in self.cacheable:
                    self.store("profile:" + uid, profile)
        return len(uids) - len(missed), len(missed)

    def fill(self, uids):
        """Writes the entries of the cacheable users (untimed): rows read 1,000 at a time."""
        for i in range(0, len(uids), 1000):
            chunk = uids[i : i + 1000]
            with self.pool.connection() as conn:
                rows = conn.table(TABLE).rows([row_key(u) for u in chunk])
            pipe = self.r.pipeline(transaction=False)
            for key, row in rows:
                pipe.set("profile:" + key.decode()[4:], json.dumps(decode_row(row)), ex=TTL_SECS)
            pipe.execute()


def latencies(ns):
    if not ns:
        return {"n": 0}
    ns = sorted(ns)
    n = len(ns)

    def at(q):
        i = min(max(int(-(-q * n // 1)), 1), n) - 1
        return round(ns[i] / 1e6, 3)

    return {
        "n": n,
        "mean_ms": round(sum(ns) / n / 1e6, 3),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": at(1.0),
    }


def run_threads(total, threads, seed, label, op):
    """`total` calls of op(rng) -> (ns, hit) over `threads` threads; progress every 5 s."""
    hits, misses, done = [], [], [0]
    lock = threading.Lock()
    errors = []

    def work(t, share):
        rng = random.Random(seed + t)
        mine_h, mine_m = [], []
        try:
            for _ in range(share):
                ns, hit = op(rng)
                (mine_h if hit else mine_m).append(ns)
                done[0] += 1
        except Exception as e:  # noqa: BLE001 - reported, stops the run
            errors.append(e)
        with lock:
            hits.extend(mine_h)
            misses.extend(mine_m)

    started = time.perf_counter()
    pool = [
        threading.Thread(target=work, args=(t, total // threads + (t < total % threads)))
        for t in range(threads)
    ]
    for th in pool:
        th.start()
    last_t, last_n = time.perf_counter(), 0
    while any(th.is_alive() for th in pool):
        time.sleep(0.1)
        if time.perf_counter() - last_t >= 5:
            n = done[0]
            rate = (n - last_n) / (time.perf_counter() - last_t)
            print(f"profile-python: {label}: {n} of {total}, {rate:.0f}/s", file=sys.stderr)
            last_t, last_n = time.perf_counter(), n
    for th in pool:
        th.join()
    if errors:
        raise errors[0]
    return hits, misses, time.perf_counter() - started


def load_average():
    try:
        return [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users-file", required=True, help="user ids, one a line, hottest first")
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--cache-fraction", type=float, default=0.1)
    p.add_argument("--reads", type=int, default=200_000)
    p.add_argument("--warmup", type=int, default=20_000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, help="time batch reads of this many distinct users")
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--backfill", choices=["sync", "async"], default="async")
    p.add_argument("--hbase", default="127.0.0.1:9090", help="Thrift1 gateway HOST:PORT")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args()
    args.hbase_host, _, port = args.hbase.rpartition(":")
    args.hbase_port = int(port)
    load_before = load_average()

    with open(args.users_file) as f:
        ids = [line.strip() for line in f if line.strip()][: args.users]
    if not ids:
        sys.exit(f"error: {args.users_file} lists no user id")
    zipf = Zipf(len(ids), args.zipf)
    k = round(len(ids) * args.cache_fraction)
    reader = Reader(args, set(ids[:k]))
    try:
        reader.r.ping()
    except redis.RedisError as e:
        sys.exit(f"error: Redis at {args.redis_url} does not answer: {e}")
    t = time.perf_counter()
    reader.fill(ids[:k])
    fill_secs = time.perf_counter() - t
    print(f"profile-python: filled {k} entries in {fill_secs:.1f} s", file=sys.stderr)

    def single(rng):
        uid = ids[zipf.draw(rng)]
        t0 = time.perf_counter_ns()
        _, hit = reader.get(uid)
        return time.perf_counter_ns() - t0, hit

    if args.warmup:
        run_threads(args.warmup, args.threads, args.seed + 1_000_000, "warm-up", single)
    result = {
        "bench": "profile-python",
        "mode": "batch" if args.batch else "single",
        "backfill": args.backfill,
        "users": len(ids),
        "zipf": args.zipf,
        "threads": args.threads,
        "cacheable_users": k,
        "expected_hit_ratio": round(zipf.mass_of_top(k), 4),
        "fill": {"users": k, "secs": round(fill_secs, 1)},
        "read_path": "happybase %s (Thrift1) + redis-py %s" % (happybase.__version__, redis.__version__),
        "python": sys.version.split()[0],
    }
    if args.batch:
        counts = [0, 0]

        def batch(rng):
            chosen = set()
            while len(chosen) < args.batch:
                chosen.add(zipf.draw(rng))
            uids = [ids[r] for r in chosen]
            t0 = time.perf_counter_ns()
            h, m = reader.batch(uids)
            ns = time.perf_counter_ns() - t0
            counts[0] += h
            counts[1] += m
            return ns, True

        lat, _, secs = run_threads(args.batches, args.threads, args.seed, "batches", batch)
        result.update(
            batch_users=args.batch,
            batches=len(lat),
            secs=round(secs, 2),
            users_per_s=round(sum(counts) / secs),
            hit_ratio=round(counts[0] / max(sum(counts), 1), 4),
            batch_latency=latencies(lat),
        )
    else:
        hits, misses, secs = run_threads(args.reads, args.threads, args.seed, "reads", single)
        n = len(hits) + len(misses)
        result.update(
            reads=n,
            secs=round(secs, 2),
            reads_per_s=round(n / secs),
            hit_ratio=round(len(hits) / max(n, 1), 4),
            hits=latencies(hits),
            misses=latencies(misses),
            all=latencies(hits + misses),
        )
    if reader.backfill:
        reader.backfill.finish()
        result["backfills"] = {"written": reader.backfill.written, "dropped": reader.backfill.dropped}
    result["command"] = " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
    result["load_average"] = {"before": load_before, "after": load_average()}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
