-- wrk script for tools/bench's store messages: replays prepared requests from BENCH_BODIES, one per line
-- "PATH<TAB>HEADER: VALUE|HEADER: VALUE<TAB>BODY", each thread taking every n-th line so no request is sent
-- twice (a line sent twice would measure the duplicate path). done() prints one "WRK {json}" line with how
-- many requests wrapped around (ran out of prepared lines).
local file = os.getenv("BENCH_BODIES")
local lines = {}
local threads = {}
local index, step, wrapped = 1, 1, 0

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(file) do
    local path, headers, body = line:match("^([^\t]*)\t([^\t]*)\t(.*)$")
    local h = {}
    for pair in headers:gmatch("[^|]+") do
      local k, v = pair:match("^([^:]+):%s*(.*)$")
      h[k] = v
    end
    h["Content-Type"] = "application/json"
    table.insert(lines, { path = path, headers = h, body = body })
  end
  index = (tid or 0) + 1
  step = tonumber(os.getenv("BENCH_THREADS") or "1")
end

function request()
  local r = lines[index]
  index = index + step
  if index > #lines then index = ((tid or 0) % step) + 1; wrapped = wrapped + 1 end
  return wrk.format("POST", r.path, r.headers, r.body)
end

function done(summary, latency, requests)
  local e = summary.errors
  local wraps = 0
  for _, t in ipairs(threads) do wraps = wraps + (t:get("wrapped") or 0) end
  io.write(string.format(
    'WRK {"requests":%d,"seconds":%.3f,"errors":%d,"p50_ms":%.3f,"p99_ms":%.3f,"wrapped":%d}\n',
    summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.timeout + e.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, wraps))
end
