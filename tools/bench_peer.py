#!/usr/bin/env python3
"""The peer of tools/bench: the Python `eventsourcing` library (PostgreSQL persistence) appending the same
purchase events to the same PostgreSQL server, for a fixed time. Prints one JSON line.

  --batch 1:  one Application.save per event (a new event on a subscriber's aggregate each time)
  --batch N:  one save per subscriber batch (N events of one aggregate in one save)
  --processes P: the clients split over P processes (threads of one Python process share its GIL, so
                 more than one process lets the peer use every core, as the ledger's server does)

Run with the bench venv (.venv-bench, `pip install eventsourcing[postgres]`); tools/bench sets it up.
usage: bench_peer.py DATABASE_URL --clients C --batch B --seconds S [--processes P]
"""
import argparse, os, threading, time, urllib.parse, uuid

p = argparse.ArgumentParser()
p.add_argument("url")
p.add_argument("--clients", type=int, default=1)
p.add_argument("--batch", type=int, default=1)
p.add_argument("--seconds", type=float, default=5)
p.add_argument("--processes", type=int, default=1)
p.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
p.add_argument("--start-at", type=float, default=0, help=argparse.SUPPRESS)
a = p.parse_args()
u = urllib.parse.urlparse(a.url)
os.environ.update(
    PERSISTENCE_MODULE="eventsourcing.postgres", POSTGRES_DBNAME=u.path.lstrip("/"), POSTGRES_HOST=u.hostname,
    POSTGRES_PORT=str(u.port), POSTGRES_USER=urllib.parse.unquote(u.username),
    POSTGRES_PASSWORD=urllib.parse.unquote(u.password), POSTGRES_POOL_SIZE=str(max(5, a.clients)),
    POSTGRES_MAX_OVERFLOW="0")

from eventsourcing.application import Application  # noqa: E402
from eventsourcing.domain import Aggregate, event  # noqa: E402

DATA = {"product_id": "pro.monthly", "entitlements": ["pro"], "kind": "auto_renewable",
        "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-04-01T10:00:00Z", "period": "P1M",
        "price_minor": 999, "currency": "USD", "commission_rate": "0.30"}


class Subscriber(Aggregate):
    @event("Registered")
    def __init__(self, subscriber_id: str):
        self.subscriber_id = subscriber_id
        self.purchases = 0

    @event("Purchased")
    def purchase(self, occurred_at: str, source: str, environment: str, idempotency_key: str, data: dict, metadata: dict):
        self.purchases += 1


class Ledger(Application):
    pass


def purchase(sub, key):
    sub.purchase("2026-03-01T10:00:00Z", "bench", "production", key, dict(DATA, transaction_id=key), {"bench": True})


def split():
    """Runs the clients in several processes of this script and merges what they measured."""
    import json, subprocess, sys
    procs = max(1, min(a.processes, a.clients))
    shares = [a.clients // procs + (1 if i < a.clients % procs else 0) for i in range(procs)]
    # Every process starts appending at the same moment, once all of them have started up.
    start_at = time.time() + 2 + procs
    children = [subprocess.Popen([sys.executable, __file__, a.url, "--clients", str(n), "--batch", str(a.batch),
                                  "--seconds", str(a.seconds), "--raw", "--start-at", str(start_at)],
                                 stdout=subprocess.PIPE, text=True)
                for n in shares]
    outs = [json.loads(c.communicate()[0].strip().splitlines()[-1]) for c in children]
    latencies = sorted(x for o in outs for x in o["latencies"])
    events, seconds = sum(o["events"] for o in outs), max(o["seconds"] for o in outs)
    q = lambda f: round(latencies[min(len(latencies) - 1, int(f * len(latencies)))] * 1000, 3) if latencies else None
    print(json.dumps({"clients": a.clients, "processes": procs, "batch": a.batch, "events": events, "seconds": seconds,
                      "events_per_s": round(events / seconds, 1), "p50_ms": q(0.5), "p99_ms": q(0.99)}))


def main():
    if a.processes > 1:
        return split()
    # The library creates or replaces its tables and functions when an application starts; two processes
    # doing it at once fail with "tuple concurrently updated", so they start one after the other.
    import fcntl, tempfile
    with open(os.path.join(tempfile.gettempdir(), "subledger-bench-peer.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        app = Ledger()
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    counts = [0] * a.clients
    latencies = []
    lock = threading.Lock()
    deadline = time.monotonic() + a.seconds

    def worker(i):
        mine, n = [], 0
        sub = Subscriber(f"peer-{uuid.uuid4().hex[:8]}-{i}")
        app.save(sub)
        while time.monotonic() < deadline:
            t = time.perf_counter()
            if a.batch == 1:
                purchase(sub, f"{i}-{n}")
            else:
                sub = Subscriber(f"peer-{uuid.uuid4().hex[:8]}-{i}-{n}")
                for k in range(a.batch - 1):
                    purchase(sub, f"{i}-{n}-{k}")
            app.save(sub)
            mine.append(time.perf_counter() - t)
            n += 1
            counts[i] += a.batch
        with lock:
            latencies.extend(mine)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.clients)]
    for t in threads: t.start()
    for t in threads: t.join()
    elapsed = time.monotonic() - started
    latencies.sort()
    q = lambda f: round(latencies[min(len(latencies) - 1, int(f * len(latencies)))] * 1000, 3) if latencies else None
    import json
    out = {"clients": a.clients, "batch": a.batch, "events": sum(counts), "seconds": round(elapsed, 3),
           "events_per_s": round(sum(counts) / elapsed, 1), "p50_ms": q(0.5), "p99_ms": q(0.99)}
    if a.raw:
        out["latencies"] = latencies
    print(json.dumps(out))


if __name__ == "__main__":
    main()
