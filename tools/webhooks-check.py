#!/usr/bin/env python3
"""Outbound webhooks end to end with real processes (issue 18). A local receiver verifies every request with an
independent implementation of Standard Webhooks (the pinned `standardwebhooks` package), fails at random, times
out, answers slowly and 410s on demand. Proves: 5,000 events across 200 subscribers all delivered, each
subscriber's in order, each webhook-id with one body however often it is retried; kill -9 of the server
mid-delivery and a restart skip nothing; with two servers on one database no endpoint ever has requests of two
instances in flight, nor two of one subscriber, and a killed server's endpoints are taken over; a paused endpoint resumes from its cursor; a replay re-sends exactly its suffix; 410
disables; a rotated secret signs beside the new one. Also measures delivery throughput and the lag under a
sustained append load. Driven by tools/webhooks-check; exits non-zero on the first broken guarantee."""
import argparse, hashlib, http.client, http.server, json, os, random, signal, socket, socketserver, statistics
import subprocess, sys, threading, time

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

A = argparse.ArgumentParser()
A.add_argument("--bin", required=True); A.add_argument("--url", required=True)
A.add_argument("--admin", required=True); A.add_argument("--writer", required=True)
A.add_argument("--events", type=int, default=5000); A.add_argument("--subscribers", type=int, default=200)
A.add_argument("--load-seconds", type=float, default=10); A.add_argument("--load-rate", type=float, default=200)
A.add_argument("--bench", action="store_true", help="also time a replay of the bulk events to a fresh fast endpoint (drain rate)")
A.add_argument("--report", help="write the measurements as JSON here")
A.add_argument("--stall-bench", action="store_true",
               help="only issue 32's delivery measurements, with serve's default webhook settings: 600 events over 40 subscribers "
                    "to a receiver failing 20%% at random; 4,000 events of one subscriber vs over 400; a fast endpoint beside slow ones")
args = A.parse_args()
T0 = time.monotonic()
RESULTS = {}


def say(*m):
    print(f"webhooks [{time.monotonic() - T0:5.1f}s]:", *m, file=sys.stderr, flush=True)


def fail(m):
    say("FAILED:", m)
    for s in SERVERS: s.kill9()
    os._exit(1)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def psql(sql):
    return subprocess.run(["psql", "-X", "-A", "-t", args.url, "-c", sql], capture_output=True, text=True, check=True).stdout.strip()


# ---------------------------------------------------------------- the receiver

class Endpoint:
    """What one registered endpoint received. `mode`: ok, slow, random, down, gone."""

    def __init__(self, name, mode="ok"):
        self.name, self.mode, self.secrets = name, mode, []
        self.lock = threading.Lock()
        self.arrivals = []          # (monotonic time, webhook-id, position) of every request, in arrival order
        self.delivered = {}         # position -> first time a 2xx was answered
        self.bodies = {}            # webhook-id -> sha256 of the body (must never change)
        self.first_body = {}        # webhook-id -> the body as first received
        self.id_position = {}       # webhook-id -> position
        self.subscriber = {}        # position -> subscriber id
        self.current, self.overlaps = [], []  # requests being answered; (request, others of its subscriber) when two overlap
        self.most = 0               # requests being answered at once, at most
        self.signatures = 0         # requests carrying two signatures (rotation)
        self.problems = []
        self.cut = 0                # requests whose body was cut short by a sender killed mid-request
        self.rnd = random.Random(name)
        self.hook_id = None


ENDPOINTS = {}


def done(ep, me):
    with ep.lock:
        if me in ep.current: ep.current.remove(me)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        ep = ENDPOINTS.get(self.path.rsplit("/", 1)[-1])
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if ep is None:
            return self.answer(404)
        if len(body) < length:
            # The sender died mid-request (kill -9): a cut body is no request, as for any receiver. Only
            # complete bodies are checked; the message must still arrive whole after the restart.
            with ep.lock:
                ep.cut += 1
            self.close_connection = True
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            claimed = json.loads(body)["data"]["event"]["subscriber_id"]  # verified below
        except (ValueError, KeyError, TypeError):
            claimed = None
        me = (time.monotonic(), headers.get("webhook-id"), headers.get("webhook-timestamp"), claimed)
        with ep.lock:
            # An endpoint has several requests in flight, each of a different subscriber. Two of one subscriber
            # at once may only be a retry of the same message after the sender gave up waiting (a timeout);
            # never two messages.
            mine = [other for other in ep.current if other[3] == claimed and other[1] != me[1]]
            if mine: ep.overlaps.append((me, mine))
            ep.current.append(me)
            ep.most = max(ep.most, len(ep.current))
            secrets = list(ep.secrets)
        try:
            verified = None
            for secret in secrets:
                try:
                    verified = Webhook(secret).verify(body, headers)
                    break
                except WebhookVerificationError:
                    continue
            if verified is None:
                ep.problems.append(f"signature did not verify: id={headers.get('webhook-id')}")
                done(ep, me)
                return self.answer(400)
            wid = headers["webhook-id"]
            position = verified["data"]["event"]["position"]
            subscriber = verified["data"]["event"]["subscriber_id"]
            digest = hashlib.sha256(body).hexdigest()
            with ep.lock:
                ep.arrivals.append((time.monotonic(), wid, position))
                ep.subscriber[position] = subscriber
                ep.first_body.setdefault(wid, body)
                if ep.bodies.setdefault(wid, digest) != digest:
                    ep.problems.append(f"{wid} (position {position}) arrived with a different body")
                if ep.id_position.setdefault(wid, position) != position:
                    ep.problems.append(f"{wid} names two positions")
                if len(headers["webhook-signature"].split(" ")) > 1:
                    ep.signatures += 1
                mode, r = ep.mode, ep.rnd.random()
            status, delay, drop = 200, 0.0, False
            if mode == "slow":
                delay = 0.02
            elif mode == "down":
                status = 503
            elif mode == "gone":
                status = 410
            elif mode == "fifth":
                if r < 0.2: status = 500
            elif mode == "slow2500":
                delay = 2.5
            elif mode == "random":
                if r < 0.03: status = 500
                elif r < 0.033: delay = 0.8           # beyond --webhook-timeout 500ms: the server gives up
                elif r < 0.043: delay = 0.1           # slow but in time
                elif r < 0.053: drop = True           # connection closed without an answer
            if delay: time.sleep(delay)
            # Done before answering: the sender may send the next message as soon as it reads the answer.
            done(ep, me)
            if drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if 200 <= status < 300 and (delay < 0.5 or mode == "slow2500"):
                with ep.lock:
                    ep.delivered.setdefault(position, time.monotonic())
            self.answer(status)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            done(ep, me)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class Receiver(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a sender killed mid-request leaves a broken connection: expected here


signal.signal(signal.SIGTERM, lambda *_: fail("terminated (over the time limit)"))
RECEIVER_PORT = free_port()
receiver = Receiver(("127.0.0.1", RECEIVER_PORT), Handler)
threading.Thread(target=receiver.serve_forever, daemon=True).start()

# ---------------------------------------------------------------- servers

SERVERS = []


class Server:
    def __init__(self, give_up="3s", defaults=False):
        self.port, self.proc, self.give_up, self.defaults = free_port(), None, give_up, defaults
        SERVERS.append(self)

    def start(self):
        # `defaults`: serve's own webhook settings (timeouts, retry schedule, concurrency), as a user gets them.
        tuning = [] if self.defaults else [
            "--webhook-timeout", "500ms", "--webhook-lease-seconds", "4", "--webhook-retry-schedule", "20ms,50ms,100ms",
            "--webhook-give-up-after", self.give_up, "--webhook-concurrency", "32"]
        self.proc = subprocess.Popen(
            [args.bin, "serve", "--database-url", args.url, "--port", str(self.port), "--log-level", "error",
             "--webhooks-allow-http", "--webhooks-allow-private"] + tuning,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            if self.request("GET", "/health", timeout=1)[0] == 200: return self
            time.sleep(0.05)
        fail("server did not start")

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL); self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate(); self.proc.wait(timeout=20)

    def request(self, method, path, body=None, key=None, timeout=30):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            h = {"Content-Type": "application/json"}
            if key: h["Authorization"] = f"Bearer {key}"
            c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
            r = c.getresponse(); data = r.read(); c.close()
            return r.status, (json.loads(data) if data else None)
        except (OSError, http.client.HTTPException, json.JSONDecodeError):
            return None, None

    def api(self, method, path, body=None, expect=(200,)):
        st, out = self.request(method, path, body, key=args.admin)
        if st not in expect: fail(f"{method} {path} answered {st}: {out}")
        return out

    def pid_name(self):
        return f":{self.proc.pid}:"


def register(server, name, mode="ok", **extra):
    ep = Endpoint(name, mode)
    ENDPOINTS[name] = ep
    out = server.api("POST", "/v1/webhooks", {"url": f"http://127.0.0.1:{RECEIVER_PORT}/r/{name}", **extra}, expect=(201,))
    if not out["secret"].startswith("whsec_"): fail("the secret is not whsec_")
    ep.secrets, ep.hook_id, ep.start = [out["secret"]], out["id"], out["delivered_through"]
    st, got = server.request("GET", f"/v1/webhooks/{ep.hook_id}", key=args.admin)
    if st != 200 or "secret" in got: fail("GET shows the secret or failed")
    return ep


def event(sub, key, i):
    at = f"2026-03-{1 + i % 28:02d}T10:00:00Z"
    kind = i % 5
    if kind == 0:
        return {"subscriber_id": sub, "type": "purchase", "occurred_at": at, "source": "hooks", "environment": "production",
                "idempotency_key": key, "data": {"product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": key,
                "kind": "auto_renewable", "period_start": at, "period_end": f"2026-04-{1 + i % 28:02d}T10:00:00Z",
                "period": "P1M", "price_minor": 999, "currency": "USD"}}
    if kind == 1:
        return {"subscriber_id": sub, "type": "auto_renew_changed", "occurred_at": at, "source": "hooks",
                "environment": "production", "idempotency_key": key,
                "data": {"enabled": i % 2 == 0, "product_id": "pro.monthly", "entitlements": ["pro"]}}
    return {"subscriber_id": sub, "type": "credit", "occurred_at": at, "source": "hooks", "environment": "production",
            "idempotency_key": key, "data": {"entitlement": "pro" if kind != 4 else "basic", "duration": "P3D",
            "reason": "hooks", "granted_by": "hooks"}}


SEQ = [0]


def append(server, n, subscribers, prefix, batch=100, pace=None):
    """Appends n events over `subscribers`; answers (first position, last position, {position: ack time})."""
    positions, acks = [], {}
    sent = 0
    while sent < n:
        k = min(batch, n - sent)
        evs = []
        for _ in range(k):
            i = SEQ[0]; SEQ[0] += 1
            evs.append(event(f"{prefix}-{i % subscribers}", f"{prefix}-{i}", i))
        st, out = server.request("POST", "/v1/events", {"events": evs}, key=args.writer)
        if st != 201: fail(f"append answered {st}: {out}")
        now = time.monotonic()
        for e in out["events"]:
            positions.append(e["position"]); acks[e["position"]] = now
        sent += k
        if pace: time.sleep(pace)
    return positions[0], positions[-1], acks


def wait_delivered(ep, expected, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with ep.lock:
            missing = [p for p in expected if p not in ep.delivered]
        if not missing: return
        if ep.problems: fail(f"{ep.name}: {ep.problems[:3]}")
        time.sleep(0.1)
    fail(f"{what}: {len(missing)} of {len(expected)} positions never delivered to {ep.name} (first {missing[:5]})")


def check_order(ep, what):
    """Each subscriber's positions first arrive in position order. Different subscribers' may pass each other:
    an endpoint has several requests in flight, and a failed message holds only its own subscriber."""
    if ep.problems: fail(f"{ep.name}: {ep.problems[:3]}")
    firsts, seen = [], set()
    with ep.lock:
        for _, _, p in ep.arrivals:
            if p not in seen: seen.add(p); firsts.append(p)
        groups = {}
        for p in firsts: groups.setdefault(ep.subscriber.get(p), []).append(p)
    for sub, ps in groups.items():
        if ps != sorted(ps): fail(f"{what}: {ep.name} received positions of {sub} out of order")
    return firsts


def check_exclusive(ep, what):
    """No two instances ever had a request in flight to the endpoint at the same time (from the deliveries log:
    each attempt spans its latency before it was logged), and the receiver never had two different messages of
    one subscriber in flight at once."""
    if ep.overlaps:
        (t, wid, _), others = ep.overlaps[0]
        fail(f"{what}: {ep.name} received {wid} while {[o[1] for o in others]} was in flight")
    rows = psql(f"SELECT instance, extract(epoch FROM attempted_at) * 1000 - latency_ms, extract(epoch FROM attempted_at) * 1000 "
                f"FROM webhook_deliveries WHERE endpoint_id = '{ep.hook_id}' ORDER BY 2")
    spans = [(i, float(a), float(b)) for i, a, b in (r.split("|") for r in rows.splitlines() if r)]
    instances = {i for i, _, _ in spans}
    end = {}
    for inst, start, stop in spans:
        for other, other_end in end.items():
            if other != inst and start < other_end - 5:
                fail(f"{what}: {ep.name}: an attempt by {inst} started while one by {other} was in flight")
        end[inst] = max(end.get(inst, 0), stop)
    return instances


def lease_holders():
    return psql("SELECT coalesce(string_agg(DISTINCT leased_by, ','), '') FROM webhook_endpoints WHERE lease_until > now()")


# ---------------------------------------------------------------- issue 32: delivery that does not stall

def delivered_within(ep, expected, seconds):
    """Seconds until every expected position was delivered (None past `seconds`)."""
    t0 = time.monotonic()
    deadline = t0 + seconds
    while time.monotonic() < deadline:
        with ep.lock:
            if all(p in ep.delivered for p in expected): return max(ep.delivered[p] for p in expected)
        time.sleep(0.05)
    return None


if args.stall_bench:
    a = Server(defaults=True).start()
    limit = float(os.environ.get("SUBLEDGER_STALL_BENCH_SECONDS", "300"))

    def measure(ep, first, last, t0, appended):
        """Seconds until every position arrived, or how many arrived within the limit."""
        expected = list(range(first, last + 1))
        done_at = delivered_within(ep, expected, limit)
        with ep.lock:
            arrived = sum(1 for p in expected if p in ep.delivered)
        out = {"appends_seconds": round(appended - t0, 1), "delivered": arrived}
        if done_at is not None: out["seconds"] = round(done_at - t0, 1)
        else: out["seconds"] = f"over {limit:.0f}"
        return out

    say("stall bench 1: 600 events over 40 subscribers to a receiver failing 20% at random (serve's defaults)")
    fifth = register(a, "fifth", "fifth")
    t0 = time.monotonic()
    first, last, _ = append(a, 600, 40, "fifth", batch=20)
    r = measure(fifth, first, last, t0, time.monotonic())
    check_order(fifth, "stall bench 1")
    r.update(events=600, subscribers=40, requests=len(fifth.arrivals))
    RESULTS["random_fifth_failing"] = r
    say(f"stall bench 1: {r}")
    a.api("DELETE", f"/v1/webhooks/{fifth.hook_id}", expect=(204,))

    for name, subs in (("one_subscriber", 1), ("400_subscribers", 400)):
        say(f"stall bench 2: 4,000 events over {subs} subscriber(s) to a fast endpoint")
        ep = register(a, name, "ok")
        t0 = time.monotonic()
        first, last, _ = append(a, 4000, subs, name, batch=200)
        r = measure(ep, first, last, t0, time.monotonic())
        check_order(ep, name)
        r.update(events=4000, subscribers=subs)
        RESULTS[name] = r
        say(f"stall bench 2: {r}")
        a.api("DELETE", f"/v1/webhooks/{ep.hook_id}", expect=(204,))

    say("stall bench 3: a fast endpoint's 10 events beside 20 endpoints answering after 2.5 s (concurrency 16)")
    slow_eps = [register(a, f"slow{i}", "slow2500") for i in range(20)]
    quick = register(a, "quick", "ok")
    first, last, _ = append(a, 20, 20, "warm")
    time.sleep(3)
    t0 = time.monotonic()
    first, last, _ = append(a, 10, 10, "fair")
    r = measure(quick, first, last, t0, time.monotonic())
    r.update(slow_endpoints=20, fast_events=10)
    RESULTS["fast_beside_slow"] = r
    say(f"stall bench 3: {RESULTS['fast_beside_slow']}")
    for s in SERVERS: s.stop()
    if args.report:
        with open(args.report, "w") as f: json.dump(RESULTS, f, indent=2)
    print(json.dumps(RESULTS, indent=2))
    sys.exit(0)

# ---------------------------------------------------------------- 1. 5,000 events, flaky and fast endpoints

a = Server().start()
if a.request("POST", "/v1/webhooks", {"url": "ftp://example.com/"}, key=args.admin)[0] != 422: fail("ftp:// accepted")
flaky = register(a, "flaky", "random")
fast = register(a, "fast", "ok")
say(f"appending {args.events} events across {args.subscribers} subscribers")
t_append = time.monotonic()
first, last, _ = append(a, args.events, args.subscribers, "bulk")
bulk_range = (first, last)
append_s = time.monotonic() - t_append
expected = list(range(first, last + 1))
wait_delivered(fast, expected, 180, "bulk, fast endpoint")
t_fast = max(fast.delivered[p] for p in expected)
say(f"fast endpoint: {len(expected)} delivered {t_fast - t_append:.1f}s after the first append")
wait_delivered(flaky, expected, 180, "bulk, flaky endpoint")
check_order(fast, "bulk"); check_order(flaky, "bulk")
retried = sum(1 for _, wid, _ in flaky.arrivals) - len(set(w for _, w, _ in flaky.arrivals))
RESULTS["bulk"] = {"events": args.events, "subscribers": args.subscribers, "append_seconds": round(append_s, 2),
                   "fast_delivered_per_second": round(args.events / (t_fast - t_append), 1),
                   "flaky_requests": len(flaky.arrivals), "flaky_retries": retried, "fast_most_in_flight": fast.most}
say(f"bulk: ok (fast endpoint: {RESULTS['bulk']['fast_delivered_per_second']}/s from the first append; flaky endpoint: "
    f"{retried} retries, every id one body, each subscriber in order, every signature verified by standardwebhooks)")
log = a.api("GET", f"/v1/webhooks/{flaky.hook_id}/deliveries?limit=1000")["deliveries"]
if not any(d["outcome"] == "failed" and d["next_retry_at"] for d in log): fail("the deliveries log shows no scheduled retry")
if not any("timed out" in (d["error"] or "") for d in log): say("note: no timeout in the last 1,000 attempts")

# Payloads against an independent read: the entitlements as of the event's position, at its occurred_at.
sample = random.Random(7).sample(expected, 25)
for p in sample:
    wid = next(w for _, w, q in fast.arrivals if q == p)
    st, page = a.request("GET", f"/v1/events?after_position={p - 1}&limit=1", key=args.admin)
    ev = page["events"][0]
    st, ent = a.request("GET", f"/v1/subscribers/{ev['subscriber_id']}/entitlements?at={ev['occurred_at']}&as_of={p}", key=args.admin)
    if st != 200: fail(f"entitlements read answered {st}")
    payload = json.loads(fast.first_body[wid])
    if payload["data"]["entitlements"] != ent["entitlements"] or payload["data"]["entitlements_at"] != ev["occurred_at"]:
        fail(f"position {p}: the payload's entitlements differ from the as-of read: {payload['data']['entitlements']} vs {ent['entitlements']}")
    if payload["data"]["event"] != ev or payload["type"] != "ledger." + ev["type"]: fail(f"position {p}: the envelope differs from the feed")
say(f"payloads: ok ({len(sample)} sampled payloads match the feed and GET entitlements?at=occurred_at&as_of=position)")

# ---------------------------------------------------------------- 2. sustained load: lag

say(f"sustained load: {args.load_rate:.0f} events/s for {args.load_seconds:.0f}s")
lags, lag_seconds = [], []
stop = threading.Event()


def sample_lag():
    while not stop.is_set():
        st, out = a.request("GET", f"/v1/webhooks/{fast.hook_id}", key=args.admin)
        if st == 200: lags.append(out["lag_positions"]); lag_seconds.append(out["lag_seconds"])
        time.sleep(0.25)


sampler = threading.Thread(target=sample_lag); sampler.start()
batch = 10
first, last, acks = append(a, int(args.load_rate * args.load_seconds), args.subscribers, "load", batch=batch,
                           pace=batch / args.load_rate)
wait_delivered(fast, list(range(first, last + 1)), 120, "load")
stop.set(); sampler.join()
latency = sorted((fast.delivered[p] - acks[p]) * 1000 for p in range(first, last + 1))
RESULTS["load"] = {"rate_per_second": args.load_rate, "seconds": args.load_seconds, "events": last - first + 1,
                   "latency_ms_p50": round(statistics.median(latency), 1),
                   "latency_ms_p99": round(latency[int(len(latency) * 0.99) - 1], 1),
                   "latency_ms_max": round(latency[-1], 1), "lag_positions_max": max(lags),
                   "lag_seconds_max": max(lag_seconds)}
check_order(fast, "load")
say(f"load: ok ({RESULTS['load']})")

# ---------------------------------------------------------------- 3. kill -9 mid-delivery

say("kill -9 mid-delivery")
slow = register(a, "slow", "slow")
first, last, _ = append(a, 400, 50, "k9")
expected = list(range(first, last + 1))
while len(slow.delivered) < 100: time.sleep(0.01)
a.kill9()
killed_at = len(slow.delivered)
cursor = int(psql(f"SELECT delivered_through FROM webhook_endpoints WHERE endpoint_id = '{slow.hook_id}'"))
a.start()
wait_delivered(slow, expected, 120, "after kill -9")
firsts = check_order(slow, "after kill -9")
again = len(slow.arrivals) - len(set(w for _, w, _ in slow.arrivals))
RESULTS["kill9"] = {"delivered_before_kill": killed_at, "cursor_at_kill": cursor, "redelivered": again, "most_in_flight": slow.most,
                   "cut_by_the_kill": slow.cut}
say(f"kill -9: ok (killed after {killed_at} deliveries with the cursor at {cursor}; restarted; nothing skipped, "
    f"{again} delivered again with the same id and body)")

# ---------------------------------------------------------------- 4. two instances

say("two server instances on one database")
b = Server().start()
pair = []
for i in range(4):   # one at a time: each goes to whichever instance takes free leases first
    pair.append(register(a, f"pair{i}", "slow")); time.sleep(0.6)
first, last, _ = append(a, 200, 40, "pair")
time.sleep(1)
for ep in pair: wait_delivered(ep, list(range(first, last + 1)), 120, "two instances")
owners = set()
for ep in pair + [slow]:
    owners |= check_exclusive(ep, "two instances")
    check_order(ep, "two instances")
holders = lease_holders()
victim = a if a.pid_name() in holders else b
survivor = b if victim is a else a
say(f"leases held by {holders}; killing {'a' if victim is a else 'b'} with kill -9")
victim.kill9()
t_kill = time.monotonic()
first, last, _ = append(survivor, 100, 20, "takeover")
for ep in pair: wait_delivered(ep, list(range(first, last + 1)), 60, "takeover")
takeover = max(max(ep.delivered[p] for p in range(first, last + 1)) for ep in pair) - t_kill
for ep in pair:
    check_exclusive(ep, "takeover")
    check_order(ep, "takeover")
RESULTS["two_instances"] = {"takeover_seconds": round(takeover, 1), "instances_that_delivered": len(owners)}
say(f"two instances: ok (never two instances' requests in flight per endpoint; the survivor took over in {takeover:.1f}s)")
a = survivor

# ---------------------------------------------------------------- 5. pause and resume

say("a failing endpoint pauses and resumes from its cursor")
down = register(a, "down", "down")
first, last, _ = append(a, 30, 5, "pause")
deadline = time.monotonic() + 30
while a.api("GET", f"/v1/webhooks/{down.hook_id}")["status"] != "failing":
    if time.monotonic() > deadline: fail("the endpoint was never paused")
    time.sleep(0.2)
paused = a.api("GET", f"/v1/webhooks/{down.hook_id}")
# The cursor may move past held messages, never past what was not delivered or held: lag reaches back to the
# oldest held message.
if paused["lag_positions"] < 30 or paused["held_messages"] < 1: fail(f"pausing lost track of undelivered events: {paused}")
more_first, more_last, _ = append(a, 20, 5, "paused")
time.sleep(0.5)
if down.delivered: fail("a paused endpoint was delivered to")
down.mode = "ok"
a.api("PATCH", f"/v1/webhooks/{down.hook_id}", {"enabled": True})
wait_delivered(down, list(range(first, more_last + 1)), 60, "resume")
check_order(down, "resume")
say("pause/resume: ok (paused with its held messages and cursor kept; enabled, it delivered everything, each subscriber in order)")

# ---------------------------------------------------------------- 6. replay, rotation, 410

say("replay of a suffix")
head = int(psql("SELECT max(position) FROM events"))
start = head - 99
before = {p: w for _, w, p in fast.arrivals}
mark = len(fast.arrivals)
fast.delivered = {p: t for p, t in fast.delivered.items() if p < start}
a.api("POST", f"/v1/webhooks/{fast.hook_id}/replay", {"from_position": start})
wait_delivered(fast, list(range(start, head + 1)), 60, "replay")
time.sleep(0.5)
replayed = [p for _, _, p in fast.arrivals[mark:]]
if sorted(replayed[:100]) != list(range(start, head + 1)) or any(p < start for p in replayed):
    fail(f"the replay did not re-send exactly positions {start}..{head}: {replayed[:5]}…")
if any(before[p] != w for _, w, p in fast.arrivals[mark:] if p in before): fail("a replay changed a webhook-id")
check_order(fast, "replay")
st, bad = a.request("POST", f"/v1/webhooks/{fast.hook_id}/replay", {"from_position": head + 2}, key=args.admin)
if st != 422 or bad["error"].get("field") != "from_position": fail(f"a replay beyond the head answered {st}")
say("replay: ok (exactly the suffix, same ids and bodies)")

say("secret rotation")
rotated = a.api("POST", f"/v1/webhooks/{fast.hook_id}/rotate-secret")
fast.secrets = [fast.secrets[0], rotated["secret"]]
if not rotated["previous_secret_expires_at"]: fail("no rotation overlap reported")
first, last, _ = append(a, 5, 5, "rotate")
wait_delivered(fast, list(range(first, last + 1)), 30, "rotation")
fast.secrets = [rotated["secret"]]       # only the new secret from here: every request must verify with it alone
first, last, _ = append(a, 5, 5, "rotate2")
wait_delivered(fast, list(range(first, last + 1)), 30, "rotation, new secret only")
if fast.signatures < 5: fail("deliveries during the rotation did not carry two signatures")
say("rotation: ok (old and new secrets both sign for 24 h)")

say("410 Gone disables")
gone = register(a, "gone", "gone")
append(a, 3, 3, "gone")
deadline = time.monotonic() + 20
while True:
    got = a.api("GET", f"/v1/webhooks/{gone.hook_id}")
    if got["status"] == "disabled" and not got["enabled"]: break
    if time.monotonic() > deadline: fail(f"410 did not disable the endpoint: {got}")
    time.sleep(0.1)
if len(gone.arrivals) != 1: fail(f"a gone endpoint was tried {len(gone.arrivals)} times")
say("410: ok")

if args.bench:
    say(f"bench: replaying the {args.events} bulk events to a fresh fast endpoint")
    drain = register(a, "drain", "ok")
    first, last = bulk_range
    t = time.monotonic()
    a.api("POST", f"/v1/webhooks/{drain.hook_id}/replay", {"from_position": first})
    wait_delivered(drain, [last], 300, "bench")
    took = time.monotonic() - t
    check_order(drain, "bench")
    RESULTS["drain"] = {"events": last - first + 1, "seconds": round(took, 2), "delivered_per_second": round((last - first + 1) / took, 1)}
    say(f"bench: {RESULTS['drain']}")

metrics = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
metrics.request("GET", "/metrics"); text = metrics.getresponse().read().decode()
for name in ["subledger_webhook_deliveries_total", "subledger_webhook_lag_positions", "subledger_webhook_lag_seconds"]:
    if name not in text: fail(f"/metrics has no {name}")

for s in SERVERS: s.stop()
if args.report:
    with open(args.report, "w") as f: json.dump(RESULTS, f, indent=2)
print(json.dumps(RESULTS, indent=2))
say(f"ok ({time.monotonic() - T0:.0f}s)")
