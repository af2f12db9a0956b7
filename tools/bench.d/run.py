#!/usr/bin/env python3
"""The driver of tools/bench (which builds, starts PostgreSQL and exports what this needs). Runs every
scenario of issue 8 RUNS times, interleaving each ledger figure with its reference in the same run, samples
the server's resident memory during each, prints a table and writes BENCHMARKS.md.

Environment: BENCH_BIN (release subledger), DATABASE_URL, BENCH_QUICK, RUNS, SECONDS_PER_RUN, BENCH_EVENTS,
BENCH_PY (the venv's python with eventsourcing), BENCH_DIR (scratch folder, git-ignored).
"""
import json, os, platform, re, shutil, socket, statistics, subprocess, sys, threading, time, urllib.request, uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tools", "bench.d")
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
RUNS = int(os.environ.get("RUNS", "2" if QUICK else "3"))
SECS = float(os.environ.get("SECONDS_PER_RUN", "3" if QUICK else "5"))
EVENTS = int(os.environ.get("BENCH_EVENTS", "100000" if QUICK else "1000000"))
SUBSCRIBERS = int(EVENTS / 9.4)  # tools/simulate writes about 9.4 events per subscriber over 24 months
BIN = os.environ["BENCH_BIN"]
BASE = os.environ["DATABASE_URL"]
PY = os.environ.get("BENCH_PY", sys.executable)
SCRATCH = os.environ.get("BENCH_DIR", os.path.join(ROOT, ".bench"))
SINGLE_CLIENTS = [1, 8, 32, 64]
BATCHES = [100, 1000]
BATCH_CLIENTS = 4
READ_CLIENTS = [1, 16, 64]
results = {}  # scenario -> list of per-run dicts


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def db_url(name):
    return BASE.rsplit("/", 1)[0] + "/" + name


def psql(url, *args, capture=False):
    cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, *args]
    env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")
    if capture:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)


def fresh_db(name):
    psql(BASE, "-c", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", "-c", f"CREATE DATABASE {name}")
    url = db_url(name)
    subprocess.run([BIN, "migrate", "--database-url", url], check=True, capture_output=True)
    return url


def key(url, role):
    out = subprocess.run([BIN, "keys", "create", "--database-url", url, "--role", role, "--name", "bench"],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


class RSS:
    """Polls a process's VmRSS every 20 ms; `peak()` is the highest seen since `reset()`."""

    def __init__(self, pid):
        self.pid, self.high, self.stop = pid, 0, False
        threading.Thread(target=self.loop, daemon=True).start()

    def now(self):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                m = re.search(r"VmRSS:\s+(\d+)", f.read())
                return int(m.group(1)) if m else 0
        except OSError:
            return 0

    def loop(self):
        while not self.stop:
            self.high = max(self.high, self.now())
            time.sleep(0.02)

    def reset(self):
        self.high = self.now()
        return self.high

    def peak(self):
        return max(self.high, self.now())


class Server:
    def __init__(self, url, connections=40):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); self.port = s.getsockname()[1]; s.close()
        self.proc = subprocess.Popen([BIN, "serve", "--database-url", url, "--port", str(self.port), "--log-level", "error",
                                      "--db-connections", str(connections)])
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(self.base + "/ready", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        self.rss = RSS(self.proc.pid)

    def close(self):
        self.rss.stop = True
        self.proc.terminate()
        self.proc.wait(30)


def wrk(server, script, clients, env, seconds=SECS):
    threads = min(2, clients)
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(clients), "-d", f"{int(seconds)}s", "--timeout", "30s", "-s",
         os.path.join(HERE, script), server.base], capture_output=True, text=True, env=dict(os.environ, **env))
    m = re.search(r"^WRK (.*)$", out.stdout, re.M)
    if not m:
        raise RuntimeError(f"wrk failed: {out.stdout}\n{out.stderr}")
    r = json.loads(m.group(1))
    r["rps"] = r["requests"] / r["seconds"]
    return r


def measured(server, fn):
    """Runs fn with the server's RSS sampled; adds rss_start_mib and rss_peak_mib to its result."""
    start = server.rss.reset()
    r = fn()
    r["rss_start_mib"], r["rss_peak_mib"] = start / 1024, server.rss.peak() / 1024
    return r


def record(name, r):
    results.setdefault(name, []).append(r)
    log(f"{name}: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))


def pgbench(url, sql, clients, seconds=SECS):
    path = os.path.join(SCRATCH, f"pgbench-{uuid.uuid4().hex[:8]}.sql")
    with open(path, "w") as f:
        f.write(sql)
    out = subprocess.run(["pgbench", "-n", "-f", path, "-c", str(clients), "-j", str(min(2, clients)), "-T",
                          str(int(seconds)), url], capture_output=True, text=True)
    os.unlink(path)
    m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    if not m:
        log(f"pgbench did not finish a transaction: {out.stdout[-300:]} {out.stderr[-300:]}")
        return None
    return float(m.group(1))


# Rows of the same shape as the ledger's (same JSON, 32-byte hashes) into a copy of `events` with the same
# indexes (primary key and the three unique indexes), one transaction per `n` rows.
CEILING_SQL = """INSERT INTO ceiling_events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at,
  source, environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
SELECT 'c' || (s % 100000), s, s, gen_random_uuid(), 'purchase', '2026-03-01T10:00:00Z', clock_timestamp(), 'bench',
  'production', 'k' || s,
  jsonb_build_object('product_id', 'pro.monthly', 'entitlements', jsonb_build_array('pro'), 'transaction_id', 'k' || s,
    'kind', 'auto_renewable', 'period_start', '2026-03-01T10:00:00Z', 'period_end', '2026-04-01T10:00:00Z',
    'period', 'P1M', 'price_minor', 999, 'currency', 'USD', 'commission_rate', '0.30'),
  '{"bench": true}', sha256(s::text::bytea), sha256(('p' || s)::bytea), sha256(('h' || s)::bytea)
FROM (SELECT nextval('ceiling_seq') AS s FROM generate_series(1, ROWS)) g;
"""


def appends():
    url = fresh_db("subledger_bench_append")
    psql(url, "-c", "CREATE TABLE ceiling_events (LIKE events INCLUDING ALL)", "-c", "CREATE SEQUENCE ceiling_seq")
    writer = key(url, "writer")
    server = Server(url)
    peer_url = db_url("subledger_bench_peer")
    psql(BASE, "-c", "DROP DATABASE IF EXISTS subledger_bench_peer WITH (FORCE)", "-c", "CREATE DATABASE subledger_bench_peer")
    try:
        for run in range(RUNS):
            log(f"appends, run {run + 1}/{RUNS}")
            for c in SINGLE_CLIENTS:
                env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": "1", "BENCH_TAG": uuid.uuid4().hex[:8]}
                r = measured(server, lambda: wrk(server, "bench.lua", c, env))
                r["eps"] = r["rps"]
                r["pg_eps"] = pgbench(url, CEILING_SQL.replace("ROWS", "1"), c)
                record(f"append 1 x{c}", r)
            for b in BATCHES:
                env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": str(b), "BENCH_TAG": uuid.uuid4().hex[:8]}
                r = measured(server, lambda: wrk(server, "bench.lua", BATCH_CLIENTS, env))
                r["eps"] = r["rps"] * b
                tps = pgbench(url, CEILING_SQL.replace("ROWS", str(b)), BATCH_CLIENTS)
                r["pg_eps"] = tps * b if tps else None
                record(f"append {b} x{BATCH_CLIENTS}", r)
            for c, b in [(1, 1), (8, 1), (1, 100)]:
                out = subprocess.run([PY, os.path.join(ROOT, "tools", "bench_peer.py"), peer_url, "--clients", str(c),
                                      "--batch", str(b), "--seconds", str(SECS)], capture_output=True, text=True, check=True)
                record(f"peer {b} x{c}", json.loads(out.stdout.strip().splitlines()[-1]))
        counts = psql(url, "-At", "-c", "SELECT count(*), count(DISTINCT recorded_at) FROM events", capture=True)
        events, txns = map(int, counts.split("|"))
        results["group commit"] = [{"events": events, "transactions": txns}]
    finally:
        server.close()


def simulated_file():
    path = os.path.join(SCRATCH, f"sim-{SUBSCRIBERS}.jsonl")
    if not os.path.exists(path):
        log(f"simulating {SUBSCRIBERS} subscribers over 24 months (tools/simulate)")
        with open(path + ".tmp", "w") as f:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "simulate"), "--subscribers", str(SUBSCRIBERS),
                            "--months", "24", "--seed", "1"], stdout=f, check=True)
        os.rename(path + ".tmp", path)
    return path


def timed_process(cmd, **kw):
    """Runs a command, returning (seconds, peak RSS MiB from VmHWM sampled just before it exits)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, **kw)
    rss = RSS(proc.pid)
    proc.wait()
    rss.stop = True
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:2]} failed ({proc.returncode})")
    return time.monotonic() - started, rss.peak() / 1024


COLUMNS = ("subscriber_id, version, position, event_id, type, occurred_at, recorded_at, source, environment, "
           "idempotency_key, data, metadata, fingerprint, prev_hash, hash")


def bulk():
    """Import, rebuild, reads, exports and reports on one simulated ledger of EVENTS events."""
    source = simulated_file()
    url = None
    copy_file = os.path.join(SCRATCH, "events.copy")
    for run in range(RUNS):
        log(f"import, run {run + 1}/{RUNS}")
        url = fresh_db("subledger_bench_ledger")
        seconds, rss = timed_process([BIN, "import", "--database-url", url, source], stdout=subprocess.DEVNULL)
        events = int(psql(url, "-At", "-c", "SELECT count(*) FROM events", capture=True))
        psql(url, "-c", f"\\copy (SELECT {COLUMNS} FROM events ORDER BY position) TO '{copy_file}'")
        psql(url, "-c", "DROP TABLE IF EXISTS copy_target", "-c", "CREATE TABLE copy_target (LIKE events INCLUDING ALL)")
        started = time.monotonic()
        psql(url, "-c", f"\\copy copy_target ({COLUMNS}) FROM '{copy_file}'")
        copy_seconds = time.monotonic() - started
        psql(url, "-c", "DROP TABLE copy_target")
        record("import", {"events": events, "seconds": seconds, "eps": events / seconds, "pg_eps": events / copy_seconds,
                          "rss_peak_mib": rss})
    os.unlink(copy_file)
    for run in range(RUNS):
        log(f"rebuild, run {run + 1}/{RUNS}")
        seconds, rss = timed_process([BIN, "rebuild", "--database-url", url], stdout=subprocess.DEVNULL)
        started = time.monotonic()
        psql(url, "-c", f"\\copy (SELECT {COLUMNS} FROM events) TO '/dev/null'")
        copy_seconds = time.monotonic() - started
        record("rebuild", {"events": events, "seconds": seconds, "eps": events / seconds, "pg_eps": events / copy_seconds,
                           "rss_peak_mib": rss})
    reader, admin = key(url, "reader"), key(url, "admin")
    server = Server(url)
    try:
        for run in range(RUNS):
            log(f"reads, run {run + 1}/{RUNS}")
            for c in READ_CLIENTS:
                env = {"BENCH_KEY": reader, "BENCH_PREFIX": "sim1-", "BENCH_SUBSCRIBERS": str(SUBSCRIBERS)}
                r = measured(server, lambda: wrk(server, "bench.lua", c, env))
                h = wrk(server, "bench.lua", c, {"BENCH_PATH": "/health"})
                r["health_rps"], r["health_p99_ms"] = h["rps"], h["p99_ms"]
                record(f"read x{c}", r)
            for name, path in [("export events.csv", "/v1/exports/events.csv"),
                               ("report churn", "/v1/reports/churn?from=2025-01-01&to=2027-01-01&interval=month"),
                               ("report revenue", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=month")]:
                r = measured(server, lambda: http_get(server, path, admin))
                if r.get("status") == 404 and name.startswith("report"):
                    continue  # the report routes do not exist yet on this branch
                record(name, r)
    finally:
        server.close()


def http_get(server, path, secret):
    started = time.monotonic()
    req = urllib.request.Request(server.base + path, headers={"Authorization": f"Bearer {secret}"})
    size = 0
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            while chunk := resp.read(1 << 16):
                size += len(chunk)
            status = resp.status
    except urllib.error.HTTPError as e:
        status = e.code
    return {"status": status, "bytes": size, "seconds": time.monotonic() - started}


def med(name, field):
    rs = results.get(name, [])
    vals = [r[field] for r in rs if r.get(field) is not None]
    return statistics.median(vals) if vals else None


def fmt(value, spec):
    """A figure for the table, or – when the scenario did not run or failed."""
    return "–" if value is None else format(value, spec)


def peak(name):
    return max((r.get("rss_peak_mib", 0) for r in results.get(name, [])), default=0)


def report():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    L = []
    w = L.append
    w("# Benchmarks\n")
    w(f"Produced by `{'BENCH_QUICK=1 ' if QUICK else ''}tools/bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
      f"RUNS={RUNS}, SECONDS_PER_RUN={SECS:g}, {EVENTS:,} simulated events ({SUBSCRIBERS:,} subscribers × 24 months).")
    w(f"Release build, the project's private PostgreSQL 15 on loopback (default settings of tools/pg: fsync and "
      f"synchronous_commit on), {os.cpu_count()} cores ({cpu}), {platform.platform()}. The load generators (wrk, "
      "pgbench, Python) share the same cores. Each figure is the median of the runs; each ratio is taken between "
      "figures of the same run, then its median is reported. Peak RSS is the server's (or the CLI's) highest "
      "resident memory sampled every 20 ms during the scenario.\n")
    rows = []

    def ratio(name, a, b):
        rs = [r[a] / r[b] for r in results.get(name, []) if r.get(a) and r.get(b)]
        return statistics.median(rs) if rs else None

    w("## Appends\n")
    w("`POST /v1/events` with wrk (one connection per client), next to pgbench inserting rows of the same shape "
      "(same JSON, 32-byte hashes) into a copy of `events` with the same indexes, with the same number of clients "
      "and rows per transaction: PostgreSQL's own ceiling. The ledger also keeps the hash chain, the "
      "idempotency check and the projection in the same transaction.\n")
    w("| clients | events per request | ledger events/s | p50 ms | p99 ms | PostgreSQL rows/s | ledger / PostgreSQL | server peak RSS MiB | errors |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in SINGLE_CLIENTS:
        n = f"append 1 x{c}"
        if n not in results:
            continue
        w(f"| {c} | 1 | {fmt(med(n, 'eps'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(n, 'p99_ms'), '.2f')} | {fmt(med(n, 'pg_eps'), ',.0f')} | "
          f"{fmt(ratio(n, 'eps', 'pg_eps'), '.0%')} | {peak(n):.0f} | {sum(r['errors'] for r in results[n])} |")
    for b in BATCHES:
        n = f"append {b} x{BATCH_CLIENTS}"
        if n not in results:
            continue
        w(f"| {BATCH_CLIENTS} | {b} | {fmt(med(n, 'eps'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(n, 'p99_ms'), '.2f')} | {fmt(med(n, 'pg_eps'), ',.0f')} | "
          f"{fmt(ratio(n, 'eps', 'pg_eps'), '.0%')} | {peak(n):.0f} | {sum(r['errors'] for r in results[n])} |")
    g = results.get("group commit", [{}])[0]
    if g:
        w(f"\nGroup commit: the {g['events']:,} events appended above were committed in {g['transactions']:,} "
          f"transactions (distinct `recorded_at`), {g['events'] / max(1, g['transactions']):.1f} events per transaction.\n")
    w("### Peer: Python `eventsourcing` on the same server\n")
    w(f"`tools/bench_peer.py` ({PY.replace(ROOT + '/', '')}, eventsourcing with PostgreSQL persistence), the same "
      "purchase events; one `Application.save` per event, or one save per subscriber batch of 100 events.\n")
    w("| clients | events per save | peer events/s | p50 ms | p99 ms | ledger events/s (same clients, same run) | ledger / peer |")
    w("|---:|---:|---:|---:|---:|---:|---:|")
    for c, b, ledger in [(1, 1, "append 1 x1"), (8, 1, "append 1 x8"), (1, 100, f"append 100 x{BATCH_CLIENTS}")]:
        n = f"peer {b} x{c}"
        if n not in results:
            continue
        per_run = [l["eps"] / p["events_per_s"] for l, p in zip(results.get(ledger, []), results.get(n, []))] or [None]
        w(f"| {c} | {b} | {fmt(med(n, 'events_per_s'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(n, 'p99_ms'), '.2f')} | "
          f"{fmt(med(ledger, 'eps'), ',.0f')}{'' if b == 1 else f' ({BATCH_CLIENTS} clients × 100)'} | {fmt(statistics.median(per_run), '.1f')}× |")
    w("\n## Imports and rebuilds\n")
    w("| what | events | seconds | ledger events/s | PostgreSQL rows/s | ledger / PostgreSQL | peak RSS MiB (CLI) |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for n, ref in [("import", "`COPY events FROM` a file of the same rows, same indexes"),
                   ("rebuild", "`COPY (SELECT … FROM events) TO /dev/null`")]:
        if n in results:
            w(f"| `subledger {n}` vs {ref} | {fmt(med(n, 'events'), ',.0f')} | {fmt(med(n, 'seconds'), '.1f')} | {fmt(med(n, 'eps'), ',.0f')} | "
              f"{fmt(med(n, 'pg_eps'), ',.0f')} | {fmt(ratio(n, 'eps', 'pg_eps'), '.0%')} | {peak(n):.0f} |")
    w("\n## Reads\n")
    w("`GET /v1/subscribers/{id}/entitlements` of random simulated subscribers with wrk, next to `GET /health` in "
      "the same process with the same connections (the framework's ceiling).\n")
    w("| connections | requests/s | p50 ms | p99 ms | /health requests/s | /health p99 ms | entitlements / health | server RSS start → peak MiB | errors |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in READ_CLIENTS:
        n = f"read x{c}"
        if n not in results:
            continue
        w(f"| {c} | {fmt(med(n, 'rps'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(n, 'p99_ms'), '.2f')} | {fmt(med(n, 'health_rps'), ',.0f')} | "
          f"{fmt(med(n, 'health_p99_ms'), '.2f')} | {fmt(ratio(n, 'rps', 'health_rps'), '.0%')} | "
          f"{min(r['rss_start_mib'] for r in results[n]):.0f} → {peak(n):.0f} | {sum(r['errors'] for r in results[n])} |")
    w("\n## Exports and reports\n")
    w("| request | status | MiB | seconds | server RSS start → peak MiB |")
    w("|---|---:|---:|---:|---:|")
    for n in ["export events.csv", "report churn", "report revenue"]:
        if n in results:
            w(f"| {n} | {results[n][0]['status']} | {med(n, 'bytes') / 2**20:.1f} | {fmt(med(n, 'seconds'), '.2f')} | "
              f"{min(r['rss_start_mib'] for r in results[n]):.0f} → {peak(n):.0f} |")
    if "report churn" not in results:
        w("\nThe report routes (`/v1/reports/churn`, `/v1/reports/revenue`) answered 404 on this build: the scenario "
          "runs as soon as they exist.")
    return "\n".join(L) + "\n"


def main():
    os.makedirs(SCRATCH, exist_ok=True)
    only = os.environ.get("BENCH_ONLY", "appends,bulk").split(",")
    if "appends" in only:
        appends()
    if "bulk" in only:
        bulk()
    with open(os.path.join(SCRATCH, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    text = report()
    tail = os.environ.get("BENCH_NOTES")
    if tail and os.path.exists(tail):
        text += "\n" + open(tail).read()
    with open(os.path.join(ROOT, "BENCHMARKS.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
