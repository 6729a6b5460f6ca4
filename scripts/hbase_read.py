#!/usr/bin/env python3
"""Read one reading's rows the way the seed's Java code addresses them, with happybase.

Used by tests/tests/hbase_live.rs to check that a standard HBase client reads what
hourglass wrote. Computes, independently of hourglass:

  narrow key  <bucket>_<device>_<Long.MAX_VALUE - ts>   bucket = %02d of
              Math.abs(device.hashCode() % 16), Java's String.hashCode
  hourly key  <device>_<hourStart>, qualifier t:<ts - hourStart>

and prints one JSON object: the keys, every cell of the narrow row
({"t:v": [value, ts_ms], ...}) and the reading's cell in the hourly row.

  .services/venv/bin/python scripts/hbase_read.py DEVICE TS [--host H] [--port P]
"""

import argparse
import json
import sys

LONG_MAX = 2**63 - 1


def java_string_hash(s):
    """Java's String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, 32-bit wrapping."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def salt_bucket(device):
    h = java_string_hash(device)
    rem = abs(h) % 16  # Java's % keeps the dividend's sign; Math.abs drops it again
    return rem


def narrow_key(device, ts):
    return "%02d_%s_%d" % (salt_bucket(device), device, LONG_MAX - ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("device")
    ap.add_argument("ts", type=int, help="event time, epoch seconds")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9090)
    args = ap.parse_args()

    import happybase

    conn = happybase.Connection(
        host=args.host, port=args.port, transport="buffered", protocol="binary", timeout=60000
    )
    try:
        nkey = narrow_key(args.device, args.ts)
        narrow = conn.table("ts_metric").row(nkey.encode(), include_timestamp=True)
        hour_start = args.ts - args.ts % 3600
        hkey = "%s_%d" % (args.device, hour_start)
        qualifier = "t:%d" % (args.ts - hour_start)
        hourly = conn.table("ts_metric_hourly").row(
            hkey.encode(), columns=[qualifier.encode()], include_timestamp=True
        )
    finally:
        conn.close()

    def cells(row):
        return {k.decode(): [v.decode(), ts] for k, (v, ts) in sorted(row.items())}

    json.dump(
        {
            "bucket": "%02d" % salt_bucket(args.device),
            "narrow_key": nkey,
            "narrow": cells(narrow),
            "hourly_key": hkey,
            "hourly": cells(hourly),
        },
        sys.stdout,
        sort_keys=True,
    )
    print()


if __name__ == "__main__":
    main()
