#!/usr/bin/env python3
"""Writes scenario.jsonl: the recording behind tests/tests/replay_scenario.rs.

Three devices report every 5 minutes from 2024-08-19T21:00:00Z (H) for 4 hours, slightly out of
order, with: an out-of-order reading within the watermark bound, an exact duplicate, a reading
late but within the allowed lateness, two readings far beyond it, an RFC 3339 timestamp, and one
malformed line of each kind. Run it again only to change the scenario; then re-bless the goldens.
"""
import json
import sys

H = 1724101200
DEVS = [("dev00786", "room031"), ("sensor-1", "room031"), ("gateway-7:temp.sensor-000123", "room007")]
out = []


def reading(dev, ts, temp, **extra):
    d = {"device": dev, "ts": ts, "temp": temp}
    d.update(extra)
    out.append(json.dumps(d, separators=(",", ":")).encode())


def note(what):
    print(f"line {len(out) + 1}: {what}", file=sys.stderr)


BAD = [
    ("truncated JSON", b'{"device":"dev00786","ts":1724101300,"temp":2'),
    ("missing metric", b'{"device":"dev00786","ts":1724101300}'),
    ("null device", b'{"device":null,"ts":1724101300,"temp":1}'),
    ("separator in id", b'{"device":"dev_1","ts":1724101300,"temp":1}'),
    ("negative ts", b'{"device":"dev1","ts":-1,"temp":1}'),
    ("non-numeric metric", b'{"device":"dev1","ts":1724101300,"temp":"hot"}'),
    ("milliseconds ts", b'{"device":"dev1","ts":1724101300000,"temp":1}'),
    ("not an object", b"[1,2,3]"),
    ("not JSON", b"not json at all"),
    ("not UTF-8", b'{"device":"dev1","ts":1724101300,"temp":1,"note":"caf\xe9"}'),
    ("over 64 KiB", b'{"device":"dev1","ts":1724101300,"temp":1,"pad":"' + b"x" * 70000 + b'"}'),
    ("null metric", b'{"device":"dev1","ts":1724101300,"temp":null}'),
]

for step in range(48):
    ts = H + step * 300
    batch = [(d, ts + i * 7, round(20 + i + step * 0.1, 1), room) for i, (d, room) in enumerate(DEVS)]
    if step % 3 == 1:
        batch.reverse()
    for d, t, v, room in batch:
        reading(d, t, v, room=room, seq=step)
    if step == 5:
        note("dev00786 20 s out of order (within the 30 s bound)")
        reading("dev00786", H + 5 * 300 - 20, 99.5, room="room031", seq=500)
    if step == 8:
        note("exact duplicate of sensor-1's step-7 reading")
        reading("sensor-1", H + 7 * 300 + 7, round(21 + 7 * 0.1, 1), room="room031", seq=7)
    if step == 14:
        note("dev00786 at H+3001, ~20 min late, within the 1 h allowed lateness")
        reading("dev00786", H + 3001, 55.5, room="room031", seq=900)
    if step == 16:
        note("sensor-1 with an RFC 3339 timestamp (fraction truncated)")
        out.append(b'{"device":"sensor-1","ts":"2024-08-19T22:20:03.900Z","temp":-3,"room":"room031"}')
    if 2 <= step < 2 + len(BAD):
        what, raw = BAD[step - 2]
        note(f"malformed: {what}")
        out.append(raw)

note("dev00786 at H+100 and sensor-1 at H+3700: beyond the allowed lateness")
reading("dev00786", H + 100, 77.7, room="room031", seq=999)
reading("sensor-1", H + 3700, 66.6, room="room031", seq=999)

with open("scenario.jsonl", "wb") as f:
    f.write(b"\n".join(out) + b"\n")
