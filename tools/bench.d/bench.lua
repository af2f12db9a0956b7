-- wrk script for tools/bench. BENCH_MODE=append: POST /v1/events with unique events (BENCH_BATCH per request,
-- 1 = a single event), keys made unique by BENCH_TAG, spread over BENCH_SUBSCRIBERS subscribers "b<n>".
-- BENCH_MODE=read: GET /v1/subscribers/{BENCH_PREFIX<n>}/entitlements for random n < BENCH_SUBSCRIBERS, or
-- BENCH_PATH (a fixed path, e.g. /health). BENCH_KEY is the bearer key. done() prints one "WRK {json}" line.
local mode = os.getenv("BENCH_MODE") or "read"
local key = os.getenv("BENCH_KEY") or ""
local batch = tonumber(os.getenv("BENCH_BATCH") or "1")
local tag = os.getenv("BENCH_TAG") or "run"
local subscribers = tonumber(os.getenv("BENCH_SUBSCRIBERS") or "100000")
local prefix = os.getenv("BENCH_PREFIX") or "sim1-"
local fixed = os.getenv("BENCH_PATH")
local counter = 0
local threads = 0

if key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
if mode == "append" then
  wrk.method = "POST"
  wrk.path = "/v1/events"
  wrk.headers["Content-Type"] = "application/json"
end

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  math.randomseed(os.time() + (tid or 0) * 7919)
end

local function event(key)
  local sub = math.random(1, subscribers)
  return string.format(
    '{"subscriber_id":"b%d","type":"purchase","occurred_at":"2026-03-01T10:00:00Z","source":"bench",' ..
    '"environment":"production","idempotency_key":"%s","data":{"product_id":"pro.monthly","entitlements":["pro"],' ..
    '"transaction_id":"%s","kind":"auto_renewable","period_start":"2026-03-01T10:00:00Z",' ..
    '"period_end":"2026-04-01T10:00:00Z","period":"P1M","price_minor":999,"currency":"USD","commission_rate":"0.30"},' ..
    '"metadata":{"bench":true}}', sub, key, key)
end

local function append()
  local body
  if batch == 1 then
    counter = counter + 1
    body = event(tag .. "-" .. tid .. "-" .. counter)
  else
    local parts = {}
    for i = 1, batch do
      counter = counter + 1
      parts[i] = event(tag .. "-" .. tid .. "-" .. counter)
    end
    body = '{"events":[' .. table.concat(parts, ",") .. ']}'
  end
  return wrk.format(nil, nil, nil, body)
end

local function read()
  if fixed then return wrk.format("GET", fixed) end
  local id = string.format("%s%06d", prefix, math.random(0, subscribers - 1))
  return wrk.format("GET", "/v1/subscribers/" .. id .. "/entitlements")
end

function request()
  if mode == "append" then return append() end
  return read()
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK {"requests":%d,"seconds":%.3f,"errors":%d,"p50_ms":%.3f,"p99_ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.timeout + e.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
