#!/usr/bin/env python3
"""Append throughput against a running subledger: N concurrent HTTP clients, each POSTing single events
or batches, for a fixed time. Prints one JSON line per run. Standard library only.

usage: bench_append.py URL KEY --clients N --batch B --seconds S --tag T
"""
import argparse, http.client, json, threading, time, urllib.parse, uuid


def event(sub, key):
    return {
        "subscriber_id": sub, "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z",
        "source": "bench", "environment": "production", "idempotency_key": key,
        "data": {"product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": key,
                 "kind": "auto_renewable", "period_start": "2026-03-01T10:00:00Z",
                 "period_end": "2026-04-01T10:00:00Z", "period": "P1M", "price_minor": 999,
                 "currency": "USD", "commission_rate": "0.30"},
        "metadata": {"bench": True},
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url"); p.add_argument("key")
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--subscribers", type=int, default=100000)
    p.add_argument("--tag", default="")
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    run = uuid.uuid4().hex[:8]
    latencies, counts, errors = [], [0] * a.clients, [0] * a.clients
    lock = threading.Lock()
    deadline = time.monotonic() + a.seconds

    def worker(i):
        conn = http.client.HTTPConnection(u.hostname, u.port)
        headers = {"Authorization": f"Bearer {a.key}", "Content-Type": "application/json"}
        n, mine = 0, []
        while time.monotonic() < deadline:
            evs = [event(f"b{(i * 7919 + n + k) % a.subscribers}", f"{run}-{i}-{n + k}") for k in range(a.batch)]
            body = json.dumps(evs[0] if a.batch == 1 else {"events": evs})
            t = time.perf_counter()
            conn.request("POST", "/v1/events", body=body, headers=headers)
            r = conn.getresponse(); r.read()
            mine.append(time.perf_counter() - t)
            if r.status == 201:
                counts[i] += a.batch
            else:
                errors[i] += 1
            n += a.batch
        with lock:
            latencies.extend(mine)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.clients)]
    for t in threads: t.start()
    for t in threads: t.join()
    elapsed = time.monotonic() - started
    latencies.sort()
    q = lambda f: round(latencies[min(len(latencies) - 1, int(f * len(latencies)))] * 1000, 2) if latencies else None
    print(json.dumps({"tag": a.tag, "clients": a.clients, "batch": a.batch, "events": sum(counts),
                      "errors": sum(errors), "seconds": round(elapsed, 2),
                      "events_per_s": round(sum(counts) / elapsed, 1), "requests": len(latencies),
                      "p50_ms": q(0.5), "p99_ms": q(0.99)}))


if __name__ == "__main__":
    main()
