#!/usr/bin/env python3
"""Several API instances on one database behave as one service (issue 19). Driven by tools/instances-check;
standard library only. Two `subledger serve` processes (A, B) and nginx round-robin in front of them:
interleaved appends and reads across both, every read with `min_position` sees the append it names; concurrent
appends through both are gapless and in order; both caches are used and invalidated (hit rates reported).
Exits non-zero on the first broken guarantee."""
import argparse, http.client, json, os, socket, subprocess, sys, threading, time

A = argparse.ArgumentParser()
for name in ("bin", "url", "writer", "reader", "auditor", "nginx-dir"):
    A.add_argument("--" + name, required=True)
A.add_argument("--rounds", type=int, default=300)
args = A.parse_args()
procs = []


def say(*m):
    print("instances-check:", *m, file=sys.stderr, flush=True)


def fail(m):
    say("FAILED:", m)
    stop()
    sys.exit(1)


def stop():
    for p in procs:
        if p.poll() is None: p.terminate()
    for p in procs:
        try: p.wait(timeout=20)
        except subprocess.TimeoutExpired: p.kill()


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def request(port, method, path, body=None, key=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json"}
    if key: h["Authorization"] = f"Bearer {key}"
    h.update(headers or {})
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read(); c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, (json.loads(data) if data and data[:1] in b"{[" else data)


def gauge(port, name):
    _, _, text = request(port, "GET", "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(name + " "): return float(line.split()[-1])
    return 0.0


def credit(sub, key, days):
    return {"subscriber_id": sub, "type": "credit", "occurred_at": "2026-03-01T00:00:00Z", "source": "instances",
            "environment": "production", "idempotency_key": key,
            "data": {"entitlement": "pro", "duration": f"P{days}D", "reason": "instances", "granted_by": "instances"}}


ports = [free_port(), free_port()]
for port in ports:
    procs.append(subprocess.Popen([args.bin, "serve", "--database-url", args.url, "--port", str(port), "--log-level", "error"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
front = free_port()
conf = subprocess.run([os.path.join(os.path.dirname(__file__), "nginx-conf"), args.nginx_dir, str(front)] + [str(p) for p in ports],
                      capture_output=True, text=True, check=True).stdout
with open(os.path.join(args.nginx_dir, "nginx.conf"), "w") as f: f.write(conf)
procs.append(subprocess.Popen(["nginx", "-p", args.nginx_dir, "-c", os.path.join(args.nginx_dir, "nginx.conf"), "-g", "daemon off;"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
for port in ports + [front]:
    for _ in range(300):
        try:
            if request(port, "GET", "/ready")[0] == 200: break
        except OSError:
            pass
        time.sleep(0.05)
    else:
        fail(f"port {port} did not become ready")
for port in ports:  # both caches listening
    for _ in range(200):
        if gauge(port, "subledger_entitlement_cache_enabled") == 1: break
        time.sleep(0.05)
    else:
        fail(f"the cache of the instance on {port} was not enabled")

# 1. Interleaved: append through one instance, read right away through the other with min_position.
say(f"{args.rounds} rounds: append through one instance, read through the other (and through nginx) with min_position")
subscribers = [f"i-{n}" for n in range(20)]
days = {s: 0 for s in subscribers}
stale_without = 0
for r in range(args.rounds):
    sub = subscribers[r % len(subscribers)]
    writer, reader = (ports[0], ports[1]) if r % 2 == 0 else (ports[1], ports[0])
    # Warm the reader's cache for this subscriber first (an entry that the append will make old).
    request(reader, "GET", f"/v1/subscribers/{sub}/windows", key=args.reader)
    st, h, body = request(writer, "POST", "/v1/events", credit(sub, f"i-{r}", 1), key=args.writer)
    if st != 201: fail(f"append {r} answered {st} {body}")
    days[sub] += 1
    p = int(h["ledger-position"])
    for port, how in ((reader, "query"), (reader, "header"), (front, "query")):
        path = f"/v1/subscribers/{sub}/windows"
        headers = None
        if how == "query": path += f"?min_position={p}"
        else: headers = {"Ledger-Min-Position": str(p)}
        st, h, body = request(port, "GET", path, key=args.reader, headers=headers)
        if st != 200: fail(f"read answered {st}")
        if len(body["windows"]) != days[sub]:
            fail(f"round {r}: a read through {port} with min_position {p} ({how}) saw {len(body['windows'])} windows, not {days[sub]}")
        if int(h["ledger-position"]) < p: fail(f"round {r}: the read says it reflects {h['ledger-position']} < {p}")
    # Without min_position the other instance may answer from before the append (until NOTIFY arrives);
    # count how often, for the report.
    st, h, body = request(reader, "GET", f"/v1/subscribers/{sub}/windows", key=args.reader)
    if len(body["windows"]) != days[sub]:
        stale_without += 1
        if int(h["ledger-position"]) >= p: fail(f"round {r}: a stale answer claims position {h['ledger-position']} >= {p}")

# 2. Concurrent appends through both instances and nginx: gapless, in order, each once.
say("concurrent appends through A, B and nginx")
acked, lock, problems = set(), threading.Lock(), []


def appender(port, n):
    for i in range(60):
        key = f"c-{port}-{n}-{i}"
        st, h, body = request(port, "POST", "/v1/events", credit(f"c-{n % 7}", key, 1), key=args.writer)
        if st != 201:
            problems.append(f"concurrent append {key} answered {st}"); return
        with lock: acked.add(key)


threads = [threading.Thread(target=appender, args=(port, n)) for port in ports + [front] for n in range(4)]
for t in threads: t.start()
for t in threads: t.join()
if problems: fail("; ".join(problems[:5]))
after, seen = 0, []
while True:
    st, h, body = request(front, "GET", f"/v1/events?after_position={after}&limit=1000", key=args.auditor)
    if not body["events"]: break
    seen += [e["position"] for e in body["events"]]; after = seen[-1]
if seen != list(range(1, len(seen) + 1)): fail("positions are not gapless and in order")
stored = {e for e in subprocess.run(["psql", "-X", "-A", "-t", args.url, "-c",
                                     "SELECT idempotency_key FROM events WHERE idempotency_key LIKE 'c-%'"],
                                    capture_output=True, text=True, check=True).stdout.split()}
if stored != acked: fail(f"{len(acked)} concurrent appends acknowledged, {len(stored)} stored")

# 3. Both caches serve, and both were invalidated by the other's appends (the checks above).
rates = []
for port in ports:
    for sub in subscribers:  # repeated reads: hits
        request(port, "GET", f"/v1/subscribers/{sub}/windows", key=args.reader)
        request(port, "GET", f"/v1/subscribers/{sub}/windows", key=args.reader)
    hits, misses = gauge(port, "subledger_entitlement_cache_hits"), gauge(port, "subledger_entitlement_cache_misses")
    if hits < 1: fail(f"the instance on {port} answered nothing from its cache")
    rates.append(f"{hits / max(1, hits + misses):.0%} of {hits + misses:.0f}")
v = subprocess.run([args.bin, "verify", "--database-url", args.url], capture_output=True, text=True)
if v.returncode != 0: fail("verify: " + v.stdout + v.stderr)
say(f"ok: {args.rounds} rounds, every min_position read correct through the other instance and nginx "
    f"({stale_without} reads without it answered before the notification arrived, each saying an older position); "
    f"{len(acked)} concurrent appends gapless; cache hit rates {rates[0]} (A), {rates[1]} (B)")
stop()
