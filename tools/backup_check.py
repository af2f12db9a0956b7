#!/usr/bin/env python3
"""Backup, 1,000 more appends, point-in-time restore to a time between them (issue 19). Driven by
tools/backup-check; standard library only. Exits non-zero on the first broken guarantee."""
import argparse, http.client, json, socket, subprocess, sys, threading, time

A = argparse.ArgumentParser()
for name in ("bin", "url", "writer", "auditor", "pg"):
    A.add_argument("--" + name, required=True)
A.add_argument("--appends", type=int, default=1000)
args = A.parse_args()


def say(*m):
    print("backup-check:", *m, file=sys.stderr, flush=True)


def fail(m):
    say("FAILED:", m)
    if server and server.poll() is None: server.terminate()
    sys.exit(1)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


PORT = free_port()
server = None


def request(method, path, body=None, key=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    h = {"Content-Type": "application/json"}
    if key: h["Authorization"] = f"Bearer {key}"
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read(); c.close()
    return r.status, (json.loads(data) if data else None)


def psql(url, sql):
    return subprocess.run(["psql", "-X", "-A", "-t", url, "-c", sql], capture_output=True, text=True, check=True).stdout.strip()


def append_all(keys):
    """Appends one event per key from 4 clients; returns every acknowledged key."""
    todo, acked, lock = list(keys), set(), threading.Lock()

    def client():
        while True:
            with lock:
                if not todo: return
                key = todo.pop()
            st, body = request("POST", "/v1/events", {
                "subscriber_id": f"b-{hash(key) % 50}", "type": "credit", "occurred_at": "2026-03-01T10:00:00Z",
                "source": "backup-check", "environment": "production", "idempotency_key": key,
                "data": {"entitlement": "pro", "duration": "P7D", "reason": "backup-check", "granted_by": "backup-check"}},
                key=args.writer)
            if st != 201: fail(f"append {key} answered {st} {body}")
            with lock: acked.add(key)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    return acked


def backup():
    out = subprocess.run([args.pg, "backup"], capture_output=True, text=True)
    if out.returncode != 0: fail("tools/pg backup: " + out.stderr[-2000:])


server = subprocess.Popen([args.bin, "serve", "--database-url", args.url, "--port", str(PORT), "--log-level", "error"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(300):
    try:
        if request("GET", "/ready")[0] == 200: break
    except OSError:
        pass
    time.sleep(0.05)
else:
    fail("the server did not start")

t0 = time.monotonic()
first = append_all([f"before-base-{i}" for i in range(20)])
say("full backup (tools/pg backup)")
backup()
half = args.appends // 2
first |= append_all([f"before-{i}" for i in range(half)])
st, sealed = request("POST", "/v1/audit/checkpoints", key=args.auditor)
if st != 201: fail(f"checkpoint before the target answered {st}")
time.sleep(1.2)
target = psql(args.url, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00'")
time.sleep(1.2)
second = append_all([f"after-{i}" for i in range(args.appends - half)])
st, later = request("POST", "/v1/audit/checkpoints", key=args.auditor)
if st != 201: fail(f"checkpoint after the target answered {st}")
server.terminate(); server.wait(timeout=20)
say(f"{len(first)} events acknowledged before {target}, {len(second)} after; checkpoints {sealed['checkpoint_id']} and {later['checkpoint_id']}")

say(f"restoring to {target} (tools/pg restore --to)")
out = subprocess.run([args.pg, "restore", "--to", target], capture_output=True, text=True)
if out.returncode != 0: fail("tools/pg restore: " + out.stderr[-3000:])
restored = out.stdout.strip().splitlines()[-1].split("=", 1)[1]
restored = restored.rsplit("/", 1)[0] + "/" + args.url.rsplit("/", 1)[1]

keys = set(psql(restored, "SELECT idempotency_key FROM events WHERE source = 'backup-check'").split())
if keys != first:
    fail(f"the restored ledger holds {len(keys)} events: {len(first - keys)} acknowledged before the target missing, "
         f"{len(keys - first)} from after it present")
count, last = psql(restored, "SELECT count(*), coalesce(max(position), 0) FROM events").split("|")
if count != last: fail(f"restored positions are not gapless ({count} events, last {last})")
ids = psql(restored, "SELECT checkpoint_id FROM checkpoints ORDER BY 1").split()
if str(sealed['checkpoint_id']) not in ids or str(later['checkpoint_id']) in ids:
    fail(f"restored checkpoints {ids}: expected {sealed['checkpoint_id']} and not {later['checkpoint_id']}")
v = subprocess.run([args.bin, "verify", "--database-url", restored], capture_output=True, text=True)
if v.returncode != 0 or "ok: every chain verifies" not in v.stdout: fail("verify on the restored ledger: " + v.stdout + v.stderr)
say(f"ok: the ledger restored to {target} holds exactly the {len(first)} events acknowledged before it "
    f"(positions 1..{last}), chains and checkpoint {sealed['checkpoint_id']} verify ({time.monotonic() - t0:.0f}s)")
