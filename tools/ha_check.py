#!/usr/bin/env python3
"""Read replicas and automatic failover with real processes (issue 19). Driven by tools/ha-check, which starts a
fresh pg_auto_failover cluster; standard library only. Exits non-zero on the first broken guarantee."""
import argparse, http.client, json, os, signal, socket, subprocess, sys, threading, time

A = argparse.ArgumentParser()
for name in ("bin", "url", "node1", "node2", "writer", "admin", "pg", "ha-dir"):
    A.add_argument("--" + name, required=True)
A.add_argument("--clients", type=int, default=8)
A.add_argument("--events-per-client", type=int, default=40)
args = A.parse_args()


def say(*m):
    print("ha-check:", *m, file=sys.stderr, flush=True)


def fail(m):
    say("FAILED:", m)
    server.stop()
    sys.exit(1)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


PORT = free_port()


def request(method, path, body=None, key=None, headers=None, timeout=15):
    """(status, headers, json body); status None when the request failed or timed out."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if key: h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
        r = c.getresponse(); data = r.read(); c.close()
        ctype = r.getheader("Content-Type") or ""
        return r.status, {k.lower(): v for k, v in r.getheaders()}, (json.loads(data) if data and "json" in ctype else data)
    except (OSError, http.client.HTTPException, json.JSONDecodeError):
        return None, {}, None


class Server:
    def __init__(self):
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [args.bin, "serve", "--database-url", args.url, "--read-database-url", args.node2, "--port", str(PORT),
             "--log-level", os.environ.get("HA_CHECK_LOG_LEVEL", "error"), "--db-timeout", "1", "--replica-wait", "250ms"],
            stdout=subprocess.DEVNULL, stderr=None)
        for _ in range(300):
            if request("GET", "/ready", timeout=1)[0] == 200:
                return
            time.sleep(0.05)
        fail("the server did not become ready")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill(); self.proc.wait()
                raise RuntimeError("the server did not stop within 20 s of SIGTERM")


def ha_psql(node, sql):
    out = subprocess.run([args.pg, "ha", "psql", node, "-d", "subledger", "-A", "-t", "-c", sql],
                         capture_output=True, text=True)
    if out.returncode != 0: raise RuntimeError(out.stderr)
    return out.stdout.strip()


def credit(sub, key, occurred="2026-03-01T10:00:00Z"):
    return {"subscriber_id": sub, "type": "credit", "occurred_at": occurred, "source": "ha-check",
            "environment": "production", "idempotency_key": key,
            "data": {"entitlement": "pro", "duration": "P30D", "reason": "ha-check", "granted_by": "ha-check"}}


def position(headers):
    return int(headers["ledger-position"]) if "ledger-position" in headers else None


def gauge(name):
    _, _, text = request("GET", "/metrics")
    for line in (text or b"").decode().splitlines():
        if line.startswith(name + " "): return float(line.split()[-1])
    return None


def active(body):
    return bool(body and body.get("entitlements") and body["entitlements"][0]["active"])


server = Server()
server.start()
AT = "at=2026-03-10T00:00:00Z"
# The change listener in place first: until then every replica load must reflect the position it starts at.
for _ in range(200):
    if gauge("subledger_entitlement_cache_enabled") == 1: break
    time.sleep(0.05)
else:
    fail("the entitlement cache was not enabled")

# ---------------------------------------------------------------- 1. replica lag
say("replica lag: replay paused on the secondary (the read replica)")
st, h, _ = request("POST", "/v1/events", credit("lag-1", "lag-1"), key=args.writer)
if st != 201: fail(f"first append answered {st}")
p1 = position(h)
for _ in range(200):
    if int(ha_psql("node2", "SELECT coalesce(max(position), 0) FROM events") or 0) >= p1: break
    time.sleep(0.05)
else:
    fail("the replica never reached the first append")
ha_psql("node2", "SELECT pg_wal_replay_pause()")
try:
    st, h, _ = request("POST", "/v1/events", credit("lag-2", "lag-2"), key=args.writer)
    if st != 201: fail(f"append with replay paused answered {st} (synchronous commit waits for the flush, not the replay)")
    p2 = position(h)
    if not p2 or p2 <= p1: fail(f"positions {p1}, {p2}")
    t0 = time.monotonic()
    st, h, body = request("GET", f"/v1/subscribers/lag-2/entitlements?{AT}&min_position={p2}", key=args.admin)
    took = time.monotonic() - t0
    if st != 200 or not active(body): fail(f"a read with min_position={p2} did not see the append: {st} {body}")
    if (position(h) or 0) < p2: fail(f"the read with min_position={p2} says it reflects {position(h)}")
    # The feed, too, with the header form.
    st, h, body = request("GET", "/v1/events?after_position=0", key=args.admin, headers={"Ledger-Min-Position": str(p2)})
    if st != 200 or p2 not in [e["position"] for e in body["events"]]: fail("the feed with Ledger-Min-Position missed the append")
    # Without min_position: as fresh as the replica, and it says so.
    st, h, body = request("GET", "/v1/events?after_position=0", key=args.admin)
    replica_position = position(h)
    if st != 200 or replica_position is None or not (p1 <= replica_position < p2):
        fail(f"a read without min_position should reflect the paused replica ({p1} <= position < {p2}): {replica_position}")
    if any(e["position"] >= p2 for e in body["events"]): fail("the paused replica answered an event it cannot have")
    st, h, body = request("GET", f"/v1/subscribers/lag-1/entitlements?{AT}", key=args.admin)
    if st != 200 or not active(body) or not (p1 <= (position(h) or 0) < p2):
        fail(f"lag-1 from the replica: {st} {position(h)} {body}")
    # This server's own append: read back without min_position, it is still seen (the last change heard of
    # for the subscriber is the read's floor), and the replica's older ledger is not cached.
    for _ in range(3):
        st, h, body = request("GET", f"/v1/subscribers/lag-2/entitlements?{AT}", key=args.admin)
        if st != 200 or not active(body): fail(f"own append not seen without min_position while the replica lags: {body}")
    fallbacks = gauge("subledger_reads_replica_fallback") or 0
    if fallbacks < 1: fail("no read fell back to the primary")
    say(f"replica lag: ok (min_position={p2} answered from the primary in {took * 1000:.0f} ms; without it the "
        f"replica's position {replica_position} was reported; {fallbacks:.0f} fallbacks)")
finally:
    ha_psql("node2", "SELECT pg_wal_replay_resume()")
st, h, _ = request("GET", "/v1/events?after_position=0", key=args.admin)
for _ in range(100):
    st, h, _ = request("GET", "/v1/events?after_position=0", key=args.admin)
    if (position(h) or 0) >= p2: break
    time.sleep(0.1)
else:
    fail("the replica did not catch up after replay resumed")

# ---------------------------------------------------------------- 2. failover
say(f"failover: {args.clients} clients appending with retries; kill -9 of the primary's postgres and keeper")
server_pid = server.proc.pid
lock = threading.Lock()
acked = {}            # key -> (positions, response time)
attempts = []         # (sent, answered, status)
retry_after_seen = [0]
kill_time = [None]
deadline = time.monotonic() + float(os.environ.get("HA_CHECK_FAILOVER_SECONDS", "150"))
problems = []


def client(n):
    for j in range(args.events_per_client):
        key = f"ha-{n}-{j}"
        ev = credit(f"ha-{n}-{j % 5}", key)
        while True:
            if time.monotonic() > deadline:
                problems.append(f"client {n} gave up on {key}"); return
            sent = time.monotonic()
            st, h, body = request("POST", "/v1/events", ev, key=args.writer, timeout=15)
            answered = time.monotonic()
            with lock:
                attempts.append((sent, answered, st))
            if st in (200, 201):
                with lock:
                    acked[key] = ([e["position"] for e in body["events"]], answered)
                break
            if st == 503:
                if "retry-after" in h:
                    with lock: retry_after_seen[0] += 1
            elif st is not None:
                problems.append(f"{key} answered {st} {body}"); return
            time.sleep(0.1)


def killer():
    while len(acked) < 60 and time.monotonic() < deadline: time.sleep(0.01)
    primary = subprocess.run([args.pg, "ha", "primary"], capture_output=True, text=True).stdout.strip()
    keeper = int(subprocess.run([args.pg, "ha", "keeper-pid", primary], capture_output=True, text=True).stdout.strip())
    with open(os.path.join(args.ha_dir, primary, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    # Both at once: the keeper's process group (pg_autoctl and its workers) and the postmaster's (it leads its own).
    kill_time[0] = time.monotonic()
    for group in (os.getpgid(keeper), postmaster):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    say(f"killed {primary} (postmaster {postmaster}, keeper {keeper}) with {len(acked)} appends acknowledged")


threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)] + [threading.Thread(target=killer)]
for t in threads: t.start()
for t in threads: t.join()
if problems: fail("; ".join(problems[:5]))
if kill_time[0] is None: fail("the primary was never killed")
if server.proc.poll() is not None: fail("the server exited")
if server.proc.pid != server_pid: fail("the server was restarted")
slowest = max(a - s for s, a, _ in attempts)
if slowest > 10: fail(f"an append took {slowest:.1f}s (an append during the switch must fail fast, never hang)")
after_kill = [a for s, a, st in attempts if s > kill_time[0] and st in (200, 201)]
first_ok = min(after_kill) - kill_time[0]
unavailable = sum(1 for s, a, st in attempts if st == 503)
failed = sum(1 for s, a, st in attempts if st is None)
expected_keys = {f"ha-{n}-{j}" for n in range(args.clients) for j in range(args.events_per_client)}
if set(acked) != expected_keys: fail(f"{len(expected_keys - set(acked))} appends never acknowledged")

# Every acknowledged event exactly once, positions gapless, versions gapless, chains verify (on the new primary).
new_primary = subprocess.run([args.pg, "ha", "primary"], capture_output=True, text=True).stdout.strip()
rows, keys = ha_psql(new_primary, "SELECT count(*), count(DISTINCT idempotency_key) FROM events WHERE source = 'ha-check' AND idempotency_key LIKE 'ha-%'").split("|")
if int(rows) != len(expected_keys) or int(keys) != len(expected_keys):
    fail(f"{len(expected_keys)} acknowledged appends, {rows} rows stored ({keys} keys)")
stored = dict(line.split("|") for line in ha_psql(new_primary, "SELECT idempotency_key, position FROM events WHERE idempotency_key LIKE 'ha-%'").splitlines())
for key, (positions, _) in acked.items():
    if int(stored[key]) != positions[0]: fail(f"{key} was acknowledged at {positions[0]} but is stored at {stored[key]}")
count, maximum = ha_psql(new_primary, "SELECT count(*), max(position) FROM events").split("|")
if count != maximum: fail(f"positions are not gapless: {count} events, last position {maximum}")
gaps = ha_psql(new_primary, "SELECT count(*) FROM (SELECT subscriber_id FROM events GROUP BY 1 HAVING max(version) <> count(*)) g")
if gaps != "0": fail(f"{gaps} streams have version gaps")
v = subprocess.run([args.bin, "verify", "--database-url", args.url], capture_output=True, text=True)
if v.returncode != 0: fail("verify: " + v.stdout + v.stderr)
# The same server reads from the new primary: the feed is complete and in order.
after, seen = 0, []
while True:
    st, h, body = request("GET", f"/v1/events?after_position={after}&limit=1000", key=args.admin)
    if st != 200: fail(f"feed after the failover answered {st}")
    if not body["events"]: break
    seen += [e["position"] for e in body["events"]]; after = seen[-1]
if seen != list(range(1, int(count) + 1)): fail("the feed after the failover is not complete and in order")
say(f"failover: ok ({len(acked)} appends acknowledged once each through the same server; {unavailable} answers 503 "
    f"unavailable ({retry_after_seen[0]} with Retry-After), {failed} cut off; slowest answer {slowest:.1f}s; "
    f"{new_primary} promoted; positions 1..{count} gapless; chains verify)")
say(f"failover time: {first_ok:.1f}s from kill -9 to the first successful append")
server.stop()
