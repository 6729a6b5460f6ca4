-- wrk script for scripts/bench-serve.sh: each request asks for a random device of
-- `hourglass generate`'s naming (dev00000…).
--   wrk -s scripts/wrk-queries.lua URL -- KIND DEVICES AT
-- KIND: `hour` (GET /api/v1/hour of the hour before AT) or `range24h` (Grafana's query_range of
-- the 24 h before AT at a 60 s step). AT: epoch seconds of the newest reading.
local kind, devices, at

function init(args)
  kind, devices, at = args[1], tonumber(args[2]), tonumber(args[3])
  math.randomseed(1 + (tonumber(tostring({}):match("0x(%x+)"), 16) or 0) % 1000)
end

function request()
  local device = string.format("dev%05d", math.random(0, devices - 1))
  local path
  if kind == "hour" then
    path = "/api/v1/hour?device=" .. device .. "&hour=" .. (at - 3600)
  else
    path = "/api/v1/query_range?query=temp%7Bdevice%3D%22" .. device .. "%22%7D&start="
      .. (at - 86400) .. "&end=" .. at .. "&step=60"
  end
  return wrk.format("GET", path)
end

-- done() runs in wrk's main Lua state, which init() never saw: bench-serve.sh adds the kind.
function done(summary, latency, requests)
  io.write(string.format(
    '{"requests":%d,"errors":%d,"req_per_s":%.1f,"p50_ms":%.2f,"p99_ms":%.2f,"max_ms":%.2f}\n',
    summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status
      + summary.errors.timeout,
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
