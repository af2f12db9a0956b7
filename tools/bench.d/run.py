#!/usr/bin/env python3
"""The driver of tools/bench (which builds, starts PostgreSQL and exports what this needs). Runs every
scenario of issue 8 RUNS times, interleaving each ledger figure with its reference in the same run, samples
the server's resident memory during each, saves the figures to $BENCH_DIR/results.json, prints the tables and
the state of issue 8's targets computed from them, and writes BENCHMARKS.md (tables, targets, then BENCH_NOTES).

Environment: BENCH_BIN (release subledger), DATABASE_URL, BENCH_QUICK, RUNS, SECONDS_PER_RUN, BENCH_EVENTS (the
simulated ledger's size; a list such as 1000000,10000000 measures everything at the first size, then imports
each further size once and times the reports on it: issue 21's "reports flat in ledger size"),
BENCH_ONLY (appends, bulk, delivery, stores; or reports: only the reports, each size imported once), BENCH_PY (the venv's python with eventsourcing), BENCH_DIR (scratch folder,
git-ignored), BENCH_NOTES (appended to BENCHMARKS.md; default tools/bench.d/notes.md, empty for none),
BENCH_OUT (where to write instead of BENCHMARKS.md).

Rendering only, measuring nothing (no build, server or database needed):
  BENCH_RENDER=.bench/results.json BENCH_OUT=/tmp/BENCHMARKS.md python3 tools/bench.d/run.py
"""
import datetime, json, os, platform, re, shutil, socket, statistics, subprocess, sys, threading, time, urllib.request, uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tools", "bench.d")
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
RUNS = int(os.environ.get("RUNS", "2" if QUICK else "3"))
SECS = float(os.environ.get("SECONDS_PER_RUN", "3" if QUICK else "5"))
SIZES = [int(n.replace("_", "")) for n in os.environ.get("BENCH_EVENTS", "").split(",") if n.strip()] or [100000 if QUICK else 1000000]
EVENTS = SIZES[0]
CACHE_MIB = int(os.environ.get("BENCH_CACHE_MIB", "256"))  # serve --entitlement-cache-mib (its default)
EVENTS_PER_SUBSCRIBER = 9.4  # tools/simulate writes about 9.4 events per subscriber over 24 months
SUBSCRIBERS = int(EVENTS / EVENTS_PER_SUBSCRIBER)
BIN = os.environ.get("BENCH_BIN")  # both checked in main() unless only rendering
BASE = os.environ.get("DATABASE_URL")
PY = os.environ.get("BENCH_PY", sys.executable)
SCRATCH = os.environ.get("BENCH_DIR", os.path.join(ROOT, ".bench"))
SINGLE_CLIENTS = [1, 8, 32, 64]
BATCHES = [100, 1000]
BATCH_CLIENTS = 4
READ_CLIENTS = [1, 16, 64]
ONLY = os.environ.get("BENCH_ONLY", "appends,bulk,delivery,stores").split(",")
WEBHOOK_EVENTS = 5000 if QUICK else 20000  # the feed a replay sends again, per run
WEBHOOK_FANOUT = 10                         # endpoints (each its own receiver) in the fan-out scenario
STORE_CLIENTS = 8
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
    # An autovacuum worker still analyzing the last import cannot be terminated by a non-superuser, and
    # FORCE then fails: wait for it and try again.
    for attempt in range(30):
        try:
            psql(BASE, "-c", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            break
        except subprocess.CalledProcessError:
            if attempt == 29:
                raise
            time.sleep(2)
    psql(BASE, "-c", f"CREATE DATABASE {name}")
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
    def __init__(self, url, connections=40, extra=()):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); self.port = s.getsockname()[1]; s.close()
        self.proc = subprocess.Popen([BIN, "serve", "--database-url", url, "--port", str(self.port), "--log-level", "error",
                                      "--db-connections", str(connections),
                                      "--entitlement-cache-mib", str(CACHE_MIB), *extra])
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


def pgbench_latency(url, sql, clients, seconds=SECS, options=None):
    """(transactions/s, median latency ms) of a pgbench script, from its per-transaction log."""
    path = os.path.join(SCRATCH, f"pgbench-{uuid.uuid4().hex[:8]}.sql")
    prefix = os.path.join(SCRATCH, f"pgbench-log-{uuid.uuid4().hex[:8]}")
    with open(path, "w") as f:
        f.write(sql)
    env = dict(os.environ, PGOPTIONS=options) if options else None
    out = subprocess.run(["pgbench", "-n", "-f", path, "-c", str(clients), "-j", str(min(2, clients)), "-T",
                          str(int(seconds)), "-l", "--log-prefix", prefix, url], capture_output=True, text=True, env=env)
    os.unlink(path)
    latencies = []
    for name in os.listdir(SCRATCH):
        full = os.path.join(SCRATCH, name)
        if full.startswith(prefix):
            with open(full) as f:
                latencies += [int(line.split()[2]) for line in f if len(line.split()) > 2]
            os.unlink(full)
    m = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    if not m or not latencies:
        log(f"pgbench did not finish a transaction: {out.stdout[-300:]} {out.stderr[-300:]}")
        return None, None
    return float(m.group(1)), statistics.median(latencies) / 1000


MESSAGE_DB = os.path.join(HERE, "message-db")
MESSAGE_DB_OPTIONS = "-c search_path=message_store,public -c client_min_messages=warning"
# One purchase-shaped message per transaction, on one of 100,000 streams (like the ledger's subscribers),
# through Message DB's own write function: its stream lock, version check and insert. The data is the ledger
# bench's purchase (tools/bench.d/bench.lua) with a transaction id of the same length, a fresh uuid per message.
MESSAGE_DB_SQL = """\\set n random(1, 100000)
\\set t random(1, 1000000000)
SELECT message_store.write_message(gen_random_uuid()::varchar, 'subscriber-' || :n, 'Purchased',
  ('{"product_id":"pro.monthly","entitlements":["pro"],"transaction_id":"b' || :client_id || '-' || :t || '","kind":"auto_renewable","period_start":"2026-03-01T10:00:00Z","period_end":"2026-04-01T10:00:00Z","period":"P1M","price_minor":999,"currency":"USD","commission_rate":"0.30"}')::jsonb,
  '{"bench": true}'::jsonb);
"""


def settle(urls):
    """Vacuums and analyses the scenario's databases, then waits for autovacuum to be idle: each run's
    batches and ceilings grow the tables by a million rows and more, and autovacuum working through them
    took one of the two cores during the next run's single appends (about half their rate); after an
    import, autovacuum's pass over the million new events overlapped the reads."""
    for url in (u for u in urls if u):
        psql(url, "-c", "SET client_min_messages = error", "-c", "VACUUM (ANALYZE)")
    for _ in range(120):
        busy = psql(BASE, "-At", "-c", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'",
                    capture=True)
        if int(busy or 0) == 0:
            return
        time.sleep(1)
    log("autovacuum still busy after 120 s; measuring anyway")


def message_db():
    """A fresh database with Message DB installed from the vendored SQL (tools/bench.d/message-db)."""
    url = fresh_db("subledger_bench_messagedb")
    env = dict(os.environ, PGOPTIONS=MESSAGE_DB_OPTIONS)
    for name in sorted(f for f in os.listdir(MESSAGE_DB) if f.endswith(".sql")):
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-f", os.path.join(MESSAGE_DB, name)],
                       check=True, env=env, capture_output=True)
    return url


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


# The inline design's ceiling (issue 21): the rows one purchase append writes, into copies of the same tables
# with the same indexes, `ROWS` events per transaction: the event, its window, the subscriber's state (upsert),
# its two runs (the entitlement's and "any entitlement"'s) and its transaction fact (a purchase has no trial
# row), after deleting the touched subscribers' earlier rows from the windows and the three report-fact tables,
# as `subledger_projection_write` (schema 0008) does, and the report rollups' cells the purchases add (schema 0014:
# revenue months, run days, churn periods, retention, MRR and paid coverage days, and schema 0018's MRR and paid
# coverage hours; summed over the transaction's
# events first, as the server sums a group's cells), and each transaction queued for the day cells (schema 0017,
# which a background worker applies later, outside the append). The ledger then writes a subscriber's whole projection
# again (earlier windows and facts too); here each subscriber keeps one row per table, so this is an upper
# bound of what the inline design can write. Subscribers "c<n>" of one transaction are distinct, and
# concurrent transactions draw neighbouring sequence values, so they never touch the same subscriber.
CEILING_INLINE_SQL = """WITH g AS (SELECT nextval('ceiling_seq') AS s FROM generate_series(1, ROWS)),
dw AS (DELETE FROM ceiling_windows WHERE subscriber_id IN (SELECT 'c' || (s % 100000) FROM g)),
dr AS (DELETE FROM ceiling_runs WHERE subscriber_id IN (SELECT 'c' || (s % 100000) FROM g)),
dt AS (DELETE FROM ceiling_transactions WHERE subscriber_id IN (SELECT 'c' || (s % 100000) FROM g)),
dtr AS (DELETE FROM ceiling_trials WHERE subscriber_id IN (SELECT 'c' || (s % 100000) FROM g)),
e AS (INSERT INTO ceiling_events (subscriber_id, version, position, event_id, type, occurred_at, recorded_at,
  source, environment, idempotency_key, data, metadata, fingerprint, prev_hash, hash)
  SELECT 'c' || (s % 100000), s, s, gen_random_uuid(), 'purchase', '2026-03-01T10:00:00Z', clock_timestamp(), 'bench',
    'production', 'k' || s,
    jsonb_build_object('product_id', 'pro.monthly', 'entitlements', jsonb_build_array('pro'), 'transaction_id', 'k' || s,
      'kind', 'auto_renewable', 'period_start', '2026-03-01T10:00:00Z', 'period_end', '2026-04-01T10:00:00Z',
      'period', 'P1M', 'price_minor', 999, 'currency', 'USD', 'commission_rate', '0.30'),
    '{"bench": true}', sha256(s::text::bytea), sha256(('p' || s)::bytea), sha256(('h' || s)::bytea)
  FROM g RETURNING subscriber_id, position, event_id),
w AS (INSERT INTO ceiling_windows SELECT subscriber_id, position, 'pro', '2026-03-01T10:00:00Z', '2026-04-01T10:00:00Z',
  '2026-04-01T10:00:00Z', 'paid', 'pro.monthly', 'k' || position, event_id, position, 'production', NULL, NULL, NULL FROM e),
st AS (INSERT INTO ceiling_state
  SELECT subscriber_id, position, '{"pro": ["2026-03-01T10:00:00Z", "2026-04-01T10:00:00Z"]}', '[]' FROM e
  ON CONFLICT (subscriber_id) DO UPDATE SET version = excluded.version, will_renew = excluded.will_renew,
    unmatched_refunds = excluded.unmatched_refunds),
r AS (INSERT INTO ceiling_runs SELECT x.entitlement, subscriber_id, position, position + 1, position, NULL
  FROM e, (VALUES ('pro'), ('')) x(entitlement)),
tx AS (INSERT INTO ceiling_transactions (source_event_id, subscriber_id, entitlements, kind, currency, gross, commission,
  occurred_us, start_us, end_us, stop_us, service_end_us, settled_us, refund_at_us, refund_amount, monthly_num, monthly_den)
SELECT event_id, subscriber_id, '{pro}', 'paid', 'USD', 999, 300, position, position, position + 1, NULL, position + 1,
  position + 1, '{}', '{}', 999, 1 FROM e),
pq AS (INSERT INTO ceiling_revenue_pending (change, source_event_id, entitlements, kind, currency, gross, commission,
  occurred_us, start_us, end_us, stop_us, refund_at_us, refund_amount, refund_cut)
  SELECT 1, event_id, '{pro}', 'paid', 'USD', 999, 300, position, position, position + 1, NULL, '{}', '{}', '{}' FROM e),
n AS (SELECT count(*) AS n FROM e),
k AS (SELECT * FROM (VALUES (''), ('pro')) x(k)),
rm AS (INSERT INTO ceiling_revenue_months AS t SELECT k, m, 'USD', n, 999 * n, 300 * n, 0, 0, 0, 499 * n, 0
  FROM n, k, (VALUES (1772323200000000::int8), (1775001600000000)) y(m)
  ON CONFLICT (entitlement, month_us, currency) DO UPDATE SET transactions = t.transactions + excluded.transactions,
    billings = t.billings + excluded.billings, commission = t.commission + excluded.commission,
    recognized = t.recognized + excluded.recognized),
rd AS (INSERT INTO ceiling_run_days AS t SELECT k, d, n * s, n * en FROM n, k,
  (VALUES (1772323200000000::int8, 1, 0), (1775001600000000, 0, 1)) y(d, s, en)
  ON CONFLICT (entitlement, day_us) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends),
cp AS (INSERT INTO ceiling_churn_periods AS t SELECT k, i, p, n * nw, 0, 0, 0, 0, n * ch FROM n, k,
  (VALUES ('day', 1772323200000000::int8, 1, 0), ('day', 1775001600000000, 0, 1), ('week', 1771804800000000, 1, 0),
          ('week', 1774828800000000, 0, 1), ('month', 1772323200000000, 1, 0), ('month', 1775001600000000, 0, 1)) y(i, p, nw, ch)
  ON CONFLICT (entitlement, period_interval, period_us) DO UPDATE SET new = t.new + excluded.new,
    churned_other = t.churned_other + excluded.churned_other),
rc AS (INSERT INTO ceiling_retention_cells AS t SELECT k, 1772323200000000, m, n * dl FROM n, k,
  (VALUES (1772323200000000::int8, 1), (1775001600000000, 1), (1777593600000000, -1)) y(m, dl)
  ON CONFLICT (entitlement, cohort_us, month_us) DO UPDATE SET delta = t.delta + excluded.delta),
md AS (INSERT INTO ceiling_mrr_days AS t SELECT k, d, 'USD', 1, 999 * n * s, 999 * n * en FROM n, k,
  (VALUES (1772323200000000::int8, 1, 0), (1775001600000000, 0, 1)) y(d, s, en)
  ON CONFLICT (entitlement, day_us, currency, denominator) DO UPDATE SET started = t.started + excluded.started,
    ended = t.ended + excluded.ended),
mh AS (INSERT INTO ceiling_mrr_hours AS t SELECT k, d, 'USD', 1, 999 * n * s, 999 * n * en FROM n, k,
  (VALUES (1772359200000000::int8, 1, 0), (1775037600000000, 0, 1)) y(d, s, en)
  ON CONFLICT (entitlement, hour_us, currency, denominator) DO UPDATE SET started = t.started + excluded.started,
    ended = t.ended + excluded.ended),
ph AS (INSERT INTO ceiling_paid_hours AS t SELECT k, d, 'USD', n * s, n * en FROM n, k,
  (VALUES (1772359200000000::int8, 1, 0), (1775037600000000, 0, 1)) y(d, s, en)
  ON CONFLICT (entitlement, hour_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends)
INSERT INTO ceiling_paid_days AS t SELECT k, d, 'USD', n * s, n * en FROM n, k,
  (VALUES (1772323200000000::int8, 1, 0), (1775001600000000, 0, 1)) y(d, s, en)
  ON CONFLICT (entitlement, day_us, currency) DO UPDATE SET starts = t.starts + excluded.starts, ends = t.ends + excluded.ends;
"""
CEILING_TABLES = [("ceiling_windows", "windows"), ("ceiling_state", "subscriber_state"), ("ceiling_runs", "report_runs"),
                  ("ceiling_transactions", "report_transactions"), ("ceiling_trials", "report_trials"),
                  ("ceiling_revenue_months", "report_revenue_months"), ("ceiling_run_days", "report_run_days"),
                  ("ceiling_churn_periods", "report_churn_periods"), ("ceiling_retention_cells", "report_retention_cells"),
                  ("ceiling_mrr_days", "report_mrr_days"), ("ceiling_paid_days", "report_paid_days"),
                  ("ceiling_revenue_pending", "report_revenue_pending"), ("ceiling_mrr_hours", "report_mrr_hours"),
                  ("ceiling_paid_hours", "report_paid_hours")]


def appends():
    url = fresh_db("subledger_bench_append")
    psql(url, "-c", "CREATE TABLE ceiling_events (LIKE events INCLUDING ALL)", "-c", "CREATE SEQUENCE ceiling_seq",
         *[a for copy, table in CEILING_TABLES for a in ("-c", f"CREATE TABLE {copy} (LIKE {table} INCLUDING ALL)")])
    # The ceiling's tables start with rows for every one of its 100,000 subscribers, so that the first run's
    # `settle` gives them real statistics: planned for empty tables, its deletes scanned whole tables and the
    # first run's ceiling measured at half the later runs' (7,476 against 16,923 events/s), which made the
    # ledger's median share of it look twice as large.
    psql(url, "-c", CEILING_INLINE_SQL.replace("ROWS", "100000"))
    writer = key(url, "writer")
    server = Server(url)
    try:
        mdb_url = message_db()
    except subprocess.CalledProcessError as e:
        log(f"Message DB did not install, its figures are left out: {(e.stderr or b'').decode(errors='replace')[-500:]}")
        mdb_url = None
    peer_url = db_url("subledger_bench_peer")
    psql(BASE, "-c", "DROP DATABASE IF EXISTS subledger_bench_peer WITH (FORCE)", "-c", "CREATE DATABASE subledger_bench_peer")
    try:
        for run in range(RUNS):
            settle([url, mdb_url, peer_url])
            log(f"appends, run {run + 1}/{RUNS}")
            for c in SINGLE_CLIENTS:
                env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": "1", "BENCH_TAG": uuid.uuid4().hex[:8]}
                r = measured(server, lambda: wrk(server, "bench.lua", c, env))
                r["eps"] = r["rps"]
                r["pg_eps"] = pgbench(url, CEILING_SQL.replace("ROWS", "1"), c)
                record(f"append 1 x{c}", r)
                if mdb_url:
                    tps, p50 = pgbench_latency(mdb_url, MESSAGE_DB_SQL, c, options=MESSAGE_DB_OPTIONS)
                    record(f"messagedb 1 x{c}", {"eps": tps, "p50_ms": p50})
            for b in BATCHES:
                env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": str(b), "BENCH_TAG": uuid.uuid4().hex[:8]}
                r = measured(server, lambda: wrk(server, "bench.lua", BATCH_CLIENTS, env))
                r["eps"] = r["rps"] * b
                tps = pgbench(url, CEILING_SQL.replace("ROWS", str(b)), BATCH_CLIENTS)
                r["pg_eps"] = tps * b if tps else None
                tps = pgbench(url, CEILING_INLINE_SQL.replace("ROWS", str(b)), BATCH_CLIENTS)
                r["inline_eps"] = tps * b if tps else None
                record(f"append {b} x{BATCH_CLIENTS}", r)
            for c, b in [(c, 1) for c in SINGLE_CLIENTS] + [(1, 100)]:
                # As many processes as cores (at most one per client): the peer is not held to one GIL.
                out = subprocess.run([PY, os.path.join(ROOT, "tools", "bench_peer.py"), peer_url, "--clients", str(c),
                                      "--batch", str(b), "--seconds", str(SECS), "--processes", str(min(c, os.cpu_count() or 1))],
                                     capture_output=True, text=True)
                try:
                    record(f"peer {b} x{c}", json.loads(out.stdout.strip().splitlines()[-1]))
                except (IndexError, ValueError):
                    log(f"the eventsourcing peer failed ({out.returncode}), its figure is left out: {out.stderr[-500:]}")
            rollup_lag(server, url, writer)
        counts = psql(url, "-At", "-c", "SELECT count(*), count(DISTINCT recorded_at) FROM events", capture=True)
        events, txns = map(int, counts.split("|"))
        results["group commit"] = [{"events": events, "transactions": txns}]
    finally:
        server.close()


# Samples, every 20 ms inside one PostgreSQL session (each statement of the loop a fresh snapshot), how old the
# oldest event the rollup worker has not followed yet is: now − the `recorded_at` of the event right after its
# cursor (0 when it is at the log's end). Prints the samples' milliseconds.
ROLLUP_LAG_SQL = """
CREATE TEMP TABLE lag_samples (ms float8);
DO $$
DECLARE
  stop timestamptz := clock_timestamp() + make_interval(secs => SECONDS);
BEGIN
  WHILE clock_timestamp() < stop LOOP
    INSERT INTO lag_samples SELECT coalesce(1000 * extract(epoch FROM clock_timestamp() - (
      SELECT e.recorded_at FROM events e WHERE e.position = (SELECT applied_position + 1 FROM report_rollup_state))), 0);
    PERFORM pg_sleep(0.02);
  END LOOP;
END $$;
SELECT ms FROM lag_samples;
"""


def rollup_lag(server, url, writer):
    """Issue 38's rollup lag: wrk appends single purchases at 64 clients (at least 10,000 of them) while a session
    samples the age of the oldest event the rollup worker has not followed."""
    env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": "1", "BENCH_TAG": uuid.uuid4().hex[:8]}
    seconds = max(SECS, 10)
    sampler = subprocess.Popen(["psql", "-X", "-q", "-At", url, "-c", ROLLUP_LAG_SQL.replace("SECONDS", str(seconds + 3))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = wrk(server, "bench.lua", 64, env, seconds=seconds)
    out, err = sampler.communicate()
    samples = [float(x) for x in out.split() if x.strip()]
    if not samples:
        log(f"the rollup lag sampler failed: {err[-500:]}")
        return
    record("rollup lag x64", {"appends": r["requests"], "eps": r["rps"], "samples": len(samples),
                              "lag_p50_ms": pct(samples, 50), "lag_p99_ms": pct(samples, 99), "lag_max_ms": max(samples),
                              "left_queued": int(psql(url, "-At", "-c", "SELECT (SELECT coalesce(max(position), 0) FROM events) - applied_position FROM report_rollup_state", capture=True))})


def simulated_file(subscribers=SUBSCRIBERS):
    path = os.path.join(SCRATCH, f"sim-{subscribers}.jsonl")
    if not os.path.exists(path):
        log(f"simulating {subscribers} subscribers over 24 months (tools/simulate)")
        with open(path + ".tmp", "w") as f:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "simulate"), "--subscribers", str(subscribers),
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
    bench_rates(url)
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
        log(f"reads: a cold pass over all {SUBSCRIBERS:,} subscribers (fills the entitlement cache)")
        record("read sweep", measured(server, lambda: sweep(server, reader, SUBSCRIBERS)))
        for run in range(RUNS):
            settle([url])
            log(f"reads, run {run + 1}/{RUNS}")
            for c in READ_CLIENTS:
                env = {"BENCH_KEY": reader, "BENCH_PREFIX": "sim1-", "BENCH_SUBSCRIBERS": str(SUBSCRIBERS)}
                r = measured(server, lambda: wrk(server, "bench.lua", c, env))
                h = wrk(server, "bench.lua", c, {"BENCH_PATH": "/health"})
                r["health_rps"], r["health_p99_ms"] = h["rps"], h["p99_ms"]
                record(f"read x{c}", r)
            record("read cache", cache_metrics(server))
            for name, path in [("export events.csv", "/v1/exports/events.csv")] + REPORT_PATHS:
                r = measured(server, lambda: http_get(server, path, admin))
                if r.get("status") == 404 and name.startswith("report"):
                    continue  # the report routes do not exist yet on this branch
                record(name, r)
    finally:
        server.close()


def reports_at(events):
    """Issue 21's "reports flat in ledger size": a further ledger of `events` simulated events, imported once
    (its time recorded as `import @N`), then every report timed RUNS times (`report … @N`)."""
    subscribers = int(events / EVENTS_PER_SUBSCRIBER)
    source = simulated_file(subscribers)
    log(f"reports at {events:,} events: import")
    url = fresh_db("subledger_bench_ledger")
    seconds, rss = timed_process([BIN, "import", "--database-url", url, source], stdout=subprocess.DEVNULL)
    count = int(psql(url, "-At", "-c", "SELECT count(*) FROM events", capture=True))
    record(f"import @{events}", {"events": count, "seconds": seconds, "eps": count / seconds, "rss_peak_mib": rss})
    seconds, rss = bench_rates(url)
    record(f"fx cells @{events}", {"events": count, "seconds": seconds, "rss_peak_mib": rss})
    admin = key(url, "admin")
    server = Server(url)
    try:
        for run in range(RUNS):
            log(f"reports at {events:,} events, run {run + 1}/{RUNS}")
            for name, path in REPORT_PATHS:
                r = measured(server, lambda: http_get(server, path, admin))
                if r.get("status") == 404:
                    continue
                r["events"] = count
                record(f"{name} @{events}", r)
    finally:
        server.close()


def sweep(server, secret, subscribers, connections=16):
    """Reads every simulated subscriber's entitlements once, in a random order, over keep-alive connections:
    the cold figure (each read a cache miss answered by PostgreSQL), and the warm-up of the runs after it."""
    import http.client, random
    ids = list(range(subscribers))
    random.Random(8).shuffle(ids)
    latencies, errors, lock = [], [0], threading.Lock()

    def work(part):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        mine, bad = [], 0
        for n in part:
            t = time.perf_counter()
            conn.request("GET", f"/v1/subscribers/sim1-{n:06d}/entitlements", headers={"Authorization": f"Bearer {secret}"})
            resp = conn.getresponse()
            resp.read()
            mine.append(time.perf_counter() - t)
            bad += resp.status != 200
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(ids[i::connections],)) for i in range(connections)]
    for t in threads: t.start()
    for t in threads: t.join()
    seconds = time.monotonic() - started
    latencies.sort()
    q = lambda f: latencies[min(len(latencies) - 1, int(f * len(latencies)))] * 1000
    return {"requests": len(latencies), "seconds": seconds, "rps": len(latencies) / seconds, "errors": errors[0],
            "p50_ms": q(0.5), "p99_ms": q(0.99), "connections": connections}


def cache_metrics(server):
    """The entitlement cache's gauges from /metrics (cumulative since the server started)."""
    text = urllib.request.urlopen(server.base + "/metrics", timeout=10).read().decode()
    found = dict(re.findall(r"^subledger_entitlement_cache_(\w+) (\S+)$", text, re.M))
    return {k: float(v) for k, v in found.items()}


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


def paired_ratio(a_name, a_field, b_name, b_field):
    """a / b between the figures of the same run of two scenarios (or of one), median over the runs."""
    rs = [a[a_field] / b[b_field] for a, b in zip(results.get(a_name, []), results.get(b_name, []))
          if a.get(a_field) and b.get(b_field)]
    return statistics.median(rs) if rs else None


def ratio(name, a, b):
    return paired_ratio(name, a, name, b)


def run_info():
    """What the header of BENCHMARKS.md says about the run; saved with the results."""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    return {"quick": QUICK, "runs": RUNS, "seconds_per_run": SECS, "events": EVENTS, "subscribers": SUBSCRIBERS, "sizes": SIZES,
            "only": ONLY, "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cores": os.cpu_count(),
            "cpu": cpu, "platform": platform.platform(), "peer_python": PY.replace(ROOT + "/", "")}


def report(run):
    L = []
    w = L.append
    skipped = [part for part in ("appends", "bulk", "delivery", "stores") if part not in run["only"]]
    only = f"BENCH_ONLY={','.join(run['only'])} " if skipped else ""
    w("# Benchmarks\n")
    w(f"Produced by `{'BENCH_QUICK=1 ' if run['quick'] else ''}{only}tools/bench` on {run['at']}: "
      f"RUNS={run['runs']}, SECONDS_PER_RUN={run['seconds_per_run']:g}, {run['events']:,} simulated events "
      f"({run['subscribers']:,} subscribers × 24 months)"
      + ("" if len(run.get("sizes") or [run["events"]]) < 2 or "bulk" not in run["only"] else
         f"; the reports also on {', '.join(f'{n:,}' for n in run['sizes'][1:])} events") + ".")
    w(f"Release build, the project's private PostgreSQL 15 on loopback (default settings of tools/pg: fsync and "
      f"synchronous_commit on), {run['cores']} cores ({run['cpu']}), {run['platform']}. The load generators (wrk, "
      "pgbench, Python) share the same cores. Each figure is the median of the runs; each ratio is taken between "
      "figures of the same run, then its median is reported. Each run of appends and of reads starts with its "
      "databases vacuumed and autovacuum idle (the previous run's batches, or the import, had left autovacuum a "
      "core's worth of work). "
      "Peak RSS is the server's (or the CLI's) highest resident memory sampled every 20 ms during the scenario.\n")

    w("## Appends\n")
    if "appends" in skipped:
        w(f"Not measured in this run (`{only.strip()}`).")
    else:
        appends_tables(w, run)
    if "bulk" in skipped:
        w("\n## Imports, rebuilds, reads, exports and reports\n")
        w(f"Not measured in this run (`{only.strip()}`).")
    else:
        bulk_tables(w, run)
    w("\n## Webhook delivery and store messages (issue 38)\n")
    flows = os.path.join(HERE, "flows.md")
    if "delivery" in skipped and "stores" in skipped:
        if os.path.exists(flows):
            w("From the last run that measured them (kept in `tools/bench.d/flows.md`):\n")
            w(open(flows).read().rstrip("\n"))
        else:
            w(f"Not measured in this run (`{only.strip()}`).")
    else:
        part = []
        part.append(f"Measured {run['at']} (`{only}tools/bench`{', BENCH_QUICK=1' if run['quick'] else ''}, RUNS={run['runs']}, "
                    f"SECONDS_PER_RUN={run['seconds_per_run']:g}).\n")
        flow_tables(part.append, run)
        text = "\n".join(part)
        w(text)
        if not os.environ.get("BENCH_RENDER"):
            with open(flows, "w") as f:
                f.write(text + "\n")
    w("\n" + targets21(run))
    w("\n" + targets(run))
    return "\n".join(L) + "\n"


def appends_tables(w, run):
    w("`POST /v1/events` with wrk (one connection per client), next to pgbench inserting rows of the same shape "
      "(same JSON, 32-byte hashes) into a copy of `events` with the same indexes, with the same number of clients "
      "and rows per transaction: PostgreSQL's own ceiling for one table (issue 8's reference; issue 21 keeps it for "
      "scale and judges batches against the inline design's ceiling below). The ledger also keeps the hash chain, the "
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
    inline = [(b, med(f"append {b} x{BATCH_CLIENTS}", "inline_eps"), ratio(f"append {b} x{BATCH_CLIENTS}", "eps", "inline_eps"))
              for b in BATCHES]
    inline = [x for x in inline if x[1] is not None]
    if inline:
        w("\nThe inline design's ceiling (issue 21): pgbench writing, per event, the rows a purchase append writes (the event, "
          "its window, the subscriber's state, two runs, the transaction fact) into copies of the same tables with the same "
          "indexes, after deleting the touched subscribers' earlier projection rows as the ledger's projection write does "
          "(but rewriting none of them), at the same clients and batch sizes: "
          + "; ".join(f"batches of {b:,}: {e:,.0f} events/s (ledger {fmt(r, '.0%')} of it)" for b, e, r in inline) + ".")
    g = results.get("group commit", [{}])[0]
    if g:
        w(f"\nGroup commit: the {g['events']:,} events appended above were committed in {g['transactions']:,} "
          f"transactions (distinct `recorded_at`), {g['events'] / max(1, g['transactions']):.1f} events per transaction.\n")
    n = "rollup lag x64"
    if n in results:
        w(f"Report rollups off the append path (issue 38): while wrk appends single purchases at 64 clients "
          f"({fmt(med(n, 'appends'), ',.0f')} appends per run, {fmt(med(n, 'eps'), ',.0f')}/s), a PostgreSQL session samples every 20 ms the "
          f"age of the oldest event `ReportRollupWorker` has not followed yet (0 when its cursor is at the log's end), "
          f"for three seconds past the burst: p50 {fmt(med(n, 'lag_p50_ms'), ',.0f')} ms, p99 {fmt(med(n, 'lag_p99_ms'), ',.0f')} ms, "
          f"max {fmt(med(n, 'lag_max_ms'), ',.0f')} ms (medians over runs); events not followed at the end: "
          f"{fmt(med(n, 'left_queued'), ',.0f')}.\n")
    w("### Peer: Message DB's `write_message`, called by pgbench\n")
    w("[Message DB](https://github.com/message-db/message-db) 1.3.0 (vendored SQL, tools/bench.d/message-db) in a "
      "database of its own on the same server: pgbench calls `message_store.write_message` once per transaction "
      "(a purchase-shaped message on one of 100,000 streams; its stream lock, version read and insert), no HTTP "
      "in between, as many connections as clients. The ledger's figures are its HTTP appends of the table above, "
      "measured right before in the same run; each ratio is taken within a run, then its median shown.\n")
    if not any(f"messagedb 1 x{c}" in results for c in SINGLE_CLIENTS):
        w("Not measured in this run (Message DB did not install, or pgbench failed: see the run's log).")
    else:
        w("| clients | Message DB events/s | p50 ms | ledger events/s | ledger p50 ms | ledger / Message DB |")
        w("|---:|---:|---:|---:|---:|---:|")
    for c in SINGLE_CLIENTS:
        n, ledger = f"messagedb 1 x{c}", f"append 1 x{c}"
        if n not in results:
            continue
        w(f"| {c} | {fmt(med(n, 'eps'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(ledger, 'eps'), ',.0f')} | "
          f"{fmt(med(ledger, 'p50_ms'), '.2f')} | {fmt(paired_ratio(ledger, 'eps', n, 'eps'), '.2f')}× |")
    w("\n### Peer: Python `eventsourcing` on the same server\n")
    w(f"`tools/bench_peer.py` ({run['peer_python']}, eventsourcing with PostgreSQL persistence), the same "
      "purchase events; one `Application.save` per event, or one save per subscriber batch of 100 events. "
      "The clients are threads split over as many Python processes as there are cores (at most one per client), "
      "so the peer is not held to one interpreter lock.\n")
    if not any(n.startswith("peer ") for n in results):
        w("Not measured in this run (the peer failed: see the run's log).")
        return
    w("| clients | events per save | peer events/s | p50 ms | p99 ms | ledger events/s (same clients, same run) | ledger / peer |")
    w("|---:|---:|---:|---:|---:|---:|---:|")
    for c, b, ledger in [(c, 1, f"append 1 x{c}") for c in SINGLE_CLIENTS] + [(1, 100, f"append 100 x{BATCH_CLIENTS}")]:
        n = f"peer {b} x{c}"
        if n not in results:
            continue
        w(f"| {c} | {b} | {fmt(med(n, 'events_per_s'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(n, 'p99_ms'), '.2f')} | "
          f"{fmt(med(ledger, 'eps'), ',.0f')}{'' if b == 1 else f' ({BATCH_CLIENTS} clients × 100)'} | "
          f"{fmt(paired_ratio(ledger, 'eps', n, 'events_per_s'), '.1f')}× |")


def bulk_tables(w, run):
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
    if "read sweep" in results:
        r = results["read sweep"][-1]
        w(f"\nBefore the runs, a cold pass reads every simulated subscriber once in a random order "
          f"({r['requests']:,} requests over {r['connections']} keep-alive connections from a Python client): "
          f"{r['rps']:,.0f} requests/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, {r['errors']} errors. "
          "Each of its reads misses the entitlement cache and is answered by PostgreSQL (one query); it leaves the "
          "cache warm for the runs in the table, as a server that has been up for a while would be.")
    if "read cache" in results:
        c = results["read cache"][-1]
        lookups = c.get("hits", 0) + c.get("misses", 0)
        w(f"\nEntitlement cache (`serve --entitlement-cache-mib {CACHE_MIB}`, docs/entitlement-cache.md) after the last run's reads: "
          f"{c.get('subscribers', 0):,.0f} subscribers held in {c.get('bytes', 0) / 2**20:.1f} MiB (estimated), "
          f"{(c.get('hits', 0) / lookups if lookups else 0):.0%} of {lookups:,.0f} lookups answered from memory since the server started.")
    w("\n## Exports and reports\n")
    w("| request | status | MiB | seconds | server RSS start → peak MiB |")
    w("|---|---:|---:|---:|---:|")
    for n in EXPORTS:
        if n in results:
            w(f"| {n} | {results[n][0]['status']} | {med(n, 'bytes') / 2**20:.1f} | {fmt(med(n, 'seconds'), '.2f')} | "
              f"{min(r['rss_start_mib'] for r in results[n]):.0f} → {peak(n):.0f} |")
    if not any(n in results for n in REPORTS):
        w("\nNo report was timed: the report routes (`/v1/reports/…`) answered 404 on this build, or failed.")
    sizes = run.get("sizes") or [run["events"]]
    if len(sizes) > 1:
        w("\n### Reports by ledger size (issue 21)\n")
        w(f"The same reports on ledgers of {' and '.join(f'{n:,}' for n in sizes)} simulated events (`BENCH_EVENTS="
          f"{','.join(str(n) for n in sizes)}`): the first is the ledger of the tables above; each further one is "
          "imported once, then every report is timed RUNS times by the same server process.\n")
        w("| report | " + " | ".join(f"seconds at {n:,} events" for n in sizes) + f" | {sizes[-1]:,} / {sizes[0]:,} |")
        w("|---|" + "---:|" * (len(sizes) + 1))
        for n in REPORTS:
            times = [report_seconds(n, size, run) for size in sizes]
            w(f"| {n.split(' ', 1)[1]} | " + " | ".join(fmt(t, '.3f') for t in times) + " | "
              + (f"{times[-1] / times[0]:.2f}×" if times[0] and times[-1] is not None else "–") + " |")
        imports = [f"import @{size}" for size in sizes[1:] if med(f"import @{size}", "seconds") is not None]
        if imports:
            w("\nImports of the further ledgers: " + "; ".join(f"{med(n, 'events'):,.0f} events in {med(n, 'seconds'):,.0f} s "
                                                             f"({med(n, 'eps'):,.0f} events/s, peak RSS {peak(n):.0f} MiB)"
                                                             for n in imports) + ".")
        cells = [f"fx cells @{size}" for size in sizes[1:] if med(f"fx cells @{size}", "seconds") is not None]
        if cells:
            w("\nReporting currency cells (EUR and USD, computed by `subledger fx import` of the bench's rates after each "
              "import, docs/reports.md): " + "; ".join(f"{med(n, 'events'):,.0f} events in {med(n, 'seconds'):,.0f} s "
                                                      f"(peak RSS {peak(n):.0f} MiB)" for n in cells) + ".")


def report_seconds(name, size, run):
    """The median seconds of a report on the ledger of `size` events (the run's first size has no suffix)."""
    first = size == run["events"] and name in results
    return med(name if first else f"{name} @{size}", "seconds")


# Every report route of Sources/LedgerServer/Routes/ReportRoutes.swift and ReportsIIRoutes.swift, over the simulation's
# two years.
REPORT_PATHS = [("report churn", "/v1/reports/churn?from=2025-01-01&to=2027-01-01&interval=month"),
                ("report revenue", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=month"),
                ("report retention", "/v1/reports/retention?from=2025-01-01&to=2027-01-01"),
                ("report trials", "/v1/reports/trials?from=2025-01-01&to=2027-01-01&interval=month"),
                ("report mrr", "/v1/reports/mrr?at=2026-06-01T00:00:00Z"),
                # Day and week grids (revenue's day cells, schema 0017) and MRR at an instant within a day.
                ("report revenue by week", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=week"),
                ("report revenue by day", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=day"),
                ("report mrr at 13:45", "/v1/reports/mrr?at=2026-06-01T13:45:00Z"),
                # Reports II (docs/reports.md): read from the facts, not rollups yet.
                ("report mrr movement", "/v1/reports/mrr-movement?from=2025-01-01&to=2027-01-01&interval=month"),
                ("report ltv", "/v1/reports/ltv?from=2025-01-01&to=2027-01-01&months=12"),
                ("report refunds", "/v1/reports/refunds?from=2025-01-01&to=2027-01-01&interval=month"),
                ("report conversion", "/v1/reports/conversion?from=2025-01-01&to=2027-01-01&interval=month"),
                # Issue 37: dimensions and a reporting currency (the bench's rates: bench_rates()).
                ("report revenue by store", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=month&group_by=store"),
                ("report revenue in EUR", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=month&currency=EUR"),
                ("report revenue by store in EUR", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=month&currency=EUR&group_by=store"),
                ("report revenue by week in USD", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=week&currency=USD"),
                ("report revenue by week by store", "/v1/reports/revenue?from=2025-01-01&to=2027-01-01&interval=week&group_by=store"),
                ("report mrr movement by country", "/v1/reports/mrr-movement?from=2025-01-01&to=2027-01-01&interval=month&group_by=country"),
                ("report mrr in EUR", "/v1/reports/mrr?at=2026-06-01T00:00:00Z&currency=EUR"),
                ("report mrr at 13:45 in EUR", "/v1/reports/mrr?at=2026-06-01T13:45:00Z&currency=EUR"),
                ("report mrr by store", "/v1/reports/mrr?at=2026-06-01T13:45:00Z&group_by=store"),
                ("report mrr by entitlement", "/v1/reports/mrr?at=2026-06-01T00:00:00Z&group_by=entitlement"),
                ("report mrr movement in EUR", "/v1/reports/mrr-movement?from=2025-01-01&to=2027-01-01&interval=month&currency=EUR"),
                ("report ltv by store", "/v1/reports/ltv?from=2025-01-01&to=2027-01-01&months=12&group_by=store"),
                ("report ltv in EUR", "/v1/reports/ltv?from=2025-01-01&to=2027-01-01&months=12&currency=EUR"),
                ("report refunds by product", "/v1/reports/refunds?from=2025-01-01&to=2027-01-01&interval=month&group_by=product_id"),
                ("report conversion by store", "/v1/reports/conversion?from=2025-01-01&to=2027-01-01&interval=month&group_by=store"),
                ("report conversion by entitlement", "/v1/reports/conversion?from=2025-01-01&to=2027-01-01&interval=month&group_by=entitlement"),
                ("report churn by country", "/v1/reports/churn?from=2025-01-01&to=2027-01-01&interval=month&group_by=country"),
                ("report trials by store", "/v1/reports/trials?from=2025-01-01&to=2027-01-01&interval=month&group_by=store")]


def bench_rates(url):
    """Loads exchange rates for every day the simulation spans (2024-12 to 2027-12), so converted reports answer:
    ECB's reference rates of 2 January to 9 May 2025 (tools/data/fx, real) cycled over the days, so that every day
    has its own rates as in real life (a converted report rounds once per rate date; one rate repeated for every day
    made those reports look cheaper than they are). Synthetic as a history, real as rates; only the bench uses them."""
    sample = os.path.join(ROOT, "tools", "data", "fx", "ecb-eurofxref-hist-2025-01-to-05.csv")
    with open(sample) as f:
        header = f.readline().rstrip("\n").split(",")
        rows = [line.rstrip("\n").split(",") for line in f if line.strip()]
    keep = [i for i, name in enumerate(header) if i > 0 and name in ("USD", "JPY", "GBP", "CHF", "AUD", "CAD", "BRL", "INR", "KRW", "SEK")]
    rows = [r for r in rows if all(i < len(r) and r[i] not in ("N/A", "") for i in keep)]
    path = os.path.join(SCRATCH, "bench-rates.csv")
    with open(path, "w") as out:
        out.write(",".join(["Date"] + [header[i] for i in keep]) + "\n")
        day, k = datetime.date(2024, 12, 1), 0
        while day < datetime.date(2028, 1, 1):
            out.write(",".join([day.isoformat()] + [rows[k % len(rows)][i] for i in keep]) + "\n")
            day += datetime.timedelta(days=1)
            k += 1
    # `fx import` also computes the reporting currency cells (EUR and USD) before it returns: timed.
    seconds, rss = timed_process([BIN, "fx", "import", "--database-url", url, path], stdout=subprocess.DEVNULL)
    return seconds, rss
REPORTS = [name for name, _ in REPORT_PATHS]
EXPORTS = ["export events.csv"] + REPORTS
# Issue 21's targets.
MDB_TIMES, LONE_P50_MS, INLINE_BATCH_SHARE, IMPORT_COPY_SHARE, REBUILD_COPY_SHARE = 1.0, 1.0, 0.5, 0.7, 0.5
READ_SHARE_21, READ_P99_TIMES, REPORT_SECONDS, REPORT_FLAT_TIMES = 0.75, 2.0, 1.0, 2.0
READ_P99_MS, READ_SHARE, READ_AT = 5, 0.5, 64  # issue 8's targets
BATCH_SHARE, PEER_TIMES, REBUILD_EPS, IMPORT_SHARE, MEMORY_RISE_MIB = 0.5, 5, 100_000, 0.7, 64


def near(value, limit, spec, finer):
    """value formatted with spec, or with finer where spec would show it equal to the limit it is judged by."""
    return format(value, finer if format(value, spec) == format(limit, spec) else spec)


def clients(c, noun="client"):
    return f"{c} {noun}{'' if c == 1 else 's'}"


def targets(run):
    """The section "Targets of issue 8 (this run)": each target's state from the figures of the tables above."""
    def not_measured(part):
        if part not in run["only"]:
            return "not measured", f"`BENCH_ONLY={','.join(run['only'])}` skipped this part"
        return "not measured", "no figure in this run (– above)"

    def state(ok):
        return "**met**" if ok else "**missed**"

    rows = []
    # Batch appends: the batch row with the best ledger / PostgreSQL ratio.
    batch = [(ratio(n, "eps", "pg_eps"), b, n) for b in BATCHES for n in [f"append {b} x{BATCH_CLIENTS}"]]
    batch = [x for x in batch if x[0] is not None]
    if batch:
        share, b, n = max(batch)
        rows.append((f"batch append ≥ {BATCH_SHARE:.0%} of PostgreSQL's insert rate for the same rows", state(share >= BATCH_SHARE),
                     f"{near(share, BATCH_SHARE, '.0%', '.1%')}: {fmt(med(n, 'eps'), ',.0f')} ledger events/s against "
                     f"{fmt(med(n, 'pg_eps'), ',.0f')} PostgreSQL rows/s (batches of {b:,} at {clients(BATCH_CLIENTS)}, "
                     f"the best of the batch rows)"))
    else:
        rows.append((f"batch append ≥ {BATCH_SHARE:.0%} of PostgreSQL's insert rate for the same rows", *not_measured("appends")))

    # Single-event appends against the peer's one save per event, at each client count measured for both.
    target = f"single-event append ≥ {PEER_TIMES}× the peer's one-save-per-event rate"
    per = [(c, paired_ratio(f"append 1 x{c}", "eps", f"peer 1 x{c}", "events_per_s"), med(f"append 1 x{c}", "eps"),
            med(f"peer 1 x{c}", "events_per_s")) for c in SINGLE_CLIENTS]
    per = [x for x in per if x[1] is not None]
    if per:
        met_at = [c for c, r, _, _ in per if r >= PEER_TIMES]
        if len(met_at) == len(per):
            st = "**met**"
        elif met_at:
            st = f"**partly met** (at {'/'.join(map(str, met_at))} client{'' if met_at == [1] else 's'})"
        else:
            st = "**missed**"
        figures = "; ".join(f"{'met' if r >= PEER_TIMES else 'missed'} at {clients(c)}: {near(r, PEER_TIMES, '.1f', '.2f')}× "
                            f"({l:,.0f} against {p:,.0f} events/s)" for c, r, l, p in per)
        ledger = [(med(f"append 1 x{c}", "eps"), c) for c in SINGLE_CLIENTS if med(f"append 1 x{c}", "eps")]
        peer = [(med(f"peer 1 x{c}", "events_per_s"), c) for c in SINGLE_CLIENTS if med(f"peer 1 x{c}", "events_per_s")]
        if ledger and peer:
            (le, lc), (pe, pc) = max(ledger), max(peer)
            figures += (f". For scale, not the target: the ledger's best ({le:,.0f}/s at {clients(lc)}) is {le / pe:.1f}× "
                        f"the peer's best ({pe:,.0f}/s at {clients(pc)})")
        rows.append((target, st, figures))
    else:
        rows.append((target, *not_measured("appends")))

    # Group commit: single-event throughput rising with every step in clients.
    target = "group commit: throughput rising with concurrency"
    seq = [(c, med(f"append 1 x{c}", "eps")) for c in SINGLE_CLIENTS]
    seq = [x for x in seq if x[1] is not None]
    if len(seq) >= 2:
        falls = [f"{a} → {b} clients" for (a, x), (b, y) in zip(seq, seq[1:]) if y <= x]
        figures = (f"{' → '.join(f'{e:,.0f}' for _, e in seq)} single-event events/s at "
                   f"{'/'.join(str(c) for c, _ in seq)} clients")
        if falls:
            figures += f" (not rising at {', '.join(falls)})"
        g = results.get("group commit", [{}])[0]
        if g:
            figures += (f"; {g['events'] / max(1, g['transactions']):.1f} events per transaction over all the appends "
                        "above, batches included")
        rows.append((target, state(not falls), figures))
    else:
        rows.append((target, *not_measured("appends")))

    # Entitlement reads at 64 connections: latency and share of /health, judged separately.
    target = f"entitlement read p99 ≤ {READ_P99_MS} ms at {READ_AT} connections, and ≥ {READ_SHARE:.0%} of `/health`'s requests/s"
    n = f"read x{READ_AT}"
    p99, share = med(n, "p99_ms"), ratio(n, "rps", "health_rps")
    if p99 is not None and share is not None:
        fast, enough = p99 <= READ_P99_MS, share >= READ_SHARE
        st = state(fast) if fast == enough else f"{state(fast)} (p99) / {state(enough)} (throughput)"
        rows.append((target, st, f"p99 {near(p99, READ_P99_MS, '.2f', '.3f')} ms; {fmt(med(n, 'rps'), ',.0f')} requests/s, "
                                 f"{near(share, READ_SHARE, '.0%', '.1%')} of `/health`'s {fmt(med(n, 'health_rps'), ',.0f')} "
                                 f"(p99 {fmt(med(n, 'health_p99_ms'), '.2f')} ms)"))
    else:
        rows.append((target, *not_measured("bulk")))

    target = f"rebuild ≥ {REBUILD_EPS:,} events/s"
    eps = med("rebuild", "eps")
    if eps is not None:
        rows.append((target, state(eps >= REBUILD_EPS), f"{near(eps, REBUILD_EPS, ',.0f', ',.1f')} events/s "
                                                        f"({fmt(med('rebuild', 'events'), ',.0f')} events in {fmt(med('rebuild', 'seconds'), '.1f')} s)"))
    else:
        rows.append((target, *not_measured("bulk")))

    target = f"import ≥ {IMPORT_SHARE:.0%} of PostgreSQL's COPY rate for the same rows"
    share = ratio("import", "eps", "pg_eps")
    if share is not None:
        rows.append((target, state(share >= IMPORT_SHARE),
                     f"{near(share, IMPORT_SHARE, '.0%', '.1%')}: {fmt(med('import', 'eps'), ',.0f')} ledger events/s against "
                     f"{fmt(med('import', 'pg_eps'), ',.0f')} COPY rows/s ({fmt(med('import', 'events'), ',.0f')} events)"))
    else:
        rows.append((target, *not_measured("bulk")))

    # Memory: one server process serves the reads, then the export and the reports; its RSS over all of them.
    target = "server memory flat during reads, exports and reports"
    spans = []
    for label, names in [("reads", ["read sweep"] + [f"read x{c}" for c in READ_CLIENTS])] + [(n, [n]) for n in EXPORTS]:
        rs = [r for m in names for r in results.get(m, []) if r.get("rss_peak_mib")]
        if rs:
            spans.append((label, min(r["rss_start_mib"] for r in rs), max(r["rss_peak_mib"] for r in rs), names[0]))
    if spans:
        low, high = min(s for _, s, _, _ in spans), max(p for _, _, p, _ in spans)
        parts = []
        for label, s, p, n in spans:
            size = f" ({med(n, 'bytes') / 2**20:.1f} MiB streamed)" if n.startswith("export") else ""
            parts.append(f"{label} {s:.0f} → {p:.0f}{size}")
        missing = [n for n in EXPORTS if n not in results]
        figures = (f"RSS start → peak MiB: {', '.join(parts)}; the highest peak is {near(high - low, MEMORY_RISE_MIB + CACHE_MIB, '.0f', '.1f')} MiB "
                   f"above the lowest start")
        if missing:
            figures += f" ({', '.join(missing)}: not measured)"
        rows.append((target, state(high - low < MEMORY_RISE_MIB + CACHE_MIB), figures))
    else:
        rows.append((target, *not_measured("bulk")))

    L = ["## Targets of issue 8 (this run)\n",
         "Computed by `tools/bench.d/run.py` from the figures in the tables above (medians of the runs; each ratio "
         "between figures of the same run). Batch appends are judged by the batch row with the best ledger / "
         "PostgreSQL ratio. Single-event appends are judged at each client count measured for both the ledger and "
         "the peer's one save per event, and are met only if met at all of them. Group commit is met when the "
         "ledger's single-event events/s rises strictly at every step in clients. The read target has two parts, "
         f"judged separately. Memory is flat when the server's RSS (sampled every 20 ms) over the reads, the export "
         f"and the reports, all served by one process, never rises {MEMORY_RISE_MIB} MiB plus the entitlement cache's "
         f"configured budget ({CACHE_MIB} MiB) or more above its lowest start: a bound that does not depend on the "
         "ledger's size, while the export streams the whole ledger (its size is shown), so a server that held the "
         f"ledger in memory would miss it once the export is larger than {MEMORY_RISE_MIB + CACHE_MIB} MiB. Not measured: the part was skipped with `BENCH_ONLY`, or its figure "
         "is missing.\n",
         "| target | state | figures of this run |", "|---|---|---|"]
    L += [f"| {t} | {st} | {f} |" for t, st, f in rows]
    return "\n".join(L)


def targets21(run):
    """The section "Targets of issue 21 (this run)"."""
    def not_measured(part):
        if part not in run["only"]:
            return "not measured", f"`BENCH_ONLY={','.join(run['only'])}` skipped this part"
        return "not measured", "no figure in this run (– above)"

    def state(ok):
        return "**met**" if ok else "**missed**"

    rows = []
    target = f"single appends ≥ Message DB's `write_message` at {'/'.join(map(str, SINGLE_CLIENTS))} clients, lone append p50 ≤ {LONE_P50_MS:g} ms"
    per = [(c, paired_ratio(f"append 1 x{c}", "eps", f"messagedb 1 x{c}", "eps"), med(f"append 1 x{c}", "eps"),
            med(f"messagedb 1 x{c}", "eps")) for c in SINGLE_CLIENTS]
    per = [x for x in per if x[1] is not None]
    lone = med("append 1 x1", "p50_ms")
    if per and lone is not None:
        met_at = [c for c, r, _, _ in per if r >= MDB_TIMES]
        ok = len(met_at) == len(per) == len(SINGLE_CLIENTS) and lone <= LONE_P50_MS
        if ok or (not met_at and lone > LONE_P50_MS):
            st = state(ok)
        else:
            parts = [f"≥ Message DB at {'/'.join(map(str, met_at))} clients"] if met_at else []
            parts += ["lone p50"] if lone <= LONE_P50_MS else []
            st = f"**partly met** ({'; '.join(parts)})"
        figures = "; ".join(f"{'met' if r >= MDB_TIMES else 'missed'} at {clients(c)}: {near(r, MDB_TIMES, '.2f', '.3f')}× "
                            f"({l:,.0f} against {m:,.0f} events/s)" for c, r, l, m in per)
        unmeasured = [c for c in SINGLE_CLIENTS if c not in [x[0] for x in per]]
        if unmeasured:
            figures += f"; not measured at {'/'.join(map(str, unmeasured))} clients"
        figures += (f"; lone append p50 {near(lone, LONE_P50_MS, '.2f', '.3f')} ms ({'met' if lone <= LONE_P50_MS else 'missed'}; "
                    f"Message DB's {fmt(med('messagedb 1 x1', 'p50_ms'), '.2f')} ms without HTTP)")
        rows.append((target, st, figures))
    else:
        rows.append((target, *not_measured("appends")))

    target = f"batch appends ≥ {INLINE_BATCH_SHARE:.0%} of PostgreSQL writing the same rows into the same tables (events and projection)"
    batch = [(ratio(n, "eps", "inline_eps"), b, n) for b in BATCHES for n in [f"append {b} x{BATCH_CLIENTS}"]]
    batch = [x for x in batch if x[0] is not None]
    if batch:
        share, b, n = max(batch)
        rows.append((target, state(share >= INLINE_BATCH_SHARE),
                     f"{near(share, INLINE_BATCH_SHARE, '.0%', '.1%')}: {fmt(med(n, 'eps'), ',.0f')} ledger events/s against "
                     f"{fmt(med(n, 'inline_eps'), ',.0f')} events/s of pgbench writing the events and their projection rows "
                     f"(batches of {b:,} at {clients(BATCH_CLIENTS)}, the best of the batch rows)"))
    else:
        rows.append((target, *not_measured("appends")))

    for name, share, ref in [("import", IMPORT_COPY_SHARE, "COPY"), ("rebuild", REBUILD_COPY_SHARE, "COPY-out")]:
        target = f"{name} ≥ {share:.0%} of {ref} of the same rows"
        r = ratio(name, "eps", "pg_eps")
        if r is not None:
            rows.append((target, state(r >= share), f"{near(r, share, '.0%', '.1%')}: {fmt(med(name, 'eps'), ',.0f')} events/s against "
                                                     f"{fmt(med(name, 'pg_eps'), ',.0f')} rows/s"))
        else:
            rows.append((target, *not_measured("bulk")))

    target = f"reads ≥ {READ_SHARE_21:.0%} of `/health` with p99 ≤ {READ_P99_TIMES:g}× `/health`'s at {READ_AT} connections"
    n = f"read x{READ_AT}"
    share, times = ratio(n, "rps", "health_rps"), paired_ratio(n, "p99_ms", n, "health_p99_ms")
    if share is not None and times is not None:
        enough, fast = share >= READ_SHARE_21, times <= READ_P99_TIMES
        st = state(fast) if fast == enough else f"{state(enough)} (throughput) / {state(fast)} (p99)"
        rows.append((target, st, f"{near(share, READ_SHARE_21, '.0%', '.1%')} of `/health`'s requests/s; p99 "
                                        f"{fmt(med(n, 'p99_ms'), '.2f')} ms, {times:.2f}× `/health`'s"))
    else:
        rows.append((target, *not_measured("bulk")))

    sizes = run.get("sizes") or [run["events"]]
    target = (f"every report ≤ {REPORT_SECONDS:g} s (on {' and '.join(f'{n:,}' for n in sizes)} events; the issue asks it of "
              "10,000,000: `BENCH_EVENTS=10000000`)")
    timed = [(size, n, report_seconds(n, size, run)) for size in sizes for n in REPORTS]
    timed = [x for x in timed if x[2] is not None]
    if timed:
        slow = [x for x in timed if x[2] > REPORT_SECONDS]
        figures = "; ".join(f"at {size:,} events: " + ", ".join(f"{n.split(' ', 1)[1]} {t:.2f} s" for s_, n, t in timed if s_ == size)
                            for size in sizes if any(s_ == size for s_, _, _ in timed))
        missing = [n.split(' ', 1)[1] for n in REPORTS if report_seconds(n, sizes[-1], run) is None]
        if missing:
            figures += f" ({', '.join(missing)} not measured at {sizes[-1]:,})"
        rows.append((target, state(not slow), figures))
    else:
        rows.append((target, *not_measured("bulk")))

    target = f"reports flat in ledger size: no report slower on the larger ledger by more than {REPORT_FLAT_TIMES:g}×"
    pairs = [(n, report_seconds(n, sizes[0], run), report_seconds(n, sizes[-1], run)) for n in REPORTS] if len(sizes) > 1 else []
    pairs = [(n, a, b) for n, a, b in pairs if a and b is not None]
    if pairs:
        worst = max(b / a for _, a, b in pairs)
        rows.append((target, state(worst <= REPORT_FLAT_TIMES),
                     f"{sizes[-1]:,} against {sizes[0]:,} events: " + ", ".join(f"{n.split(' ', 1)[1]} {b / a:.2f}×" for n, a, b in pairs)))
    elif "bulk" not in run["only"]:
        rows.append((target, *not_measured("bulk")))
    else:
        rows.append((target, "not measured", "one ledger size in this run: `BENCH_EVENTS=1000000,10000000` measures both and "
                                             "the ratio (or compare the report times of two runs)"))

    target = "issue 38: report rollup lag p99 ≤ 1 s while appends run at 64 clients (and 3 s past them)"
    n = "rollup lag x64"
    if n in results:
        p99 = med(n, "lag_p99_ms")
        rows.append((target, state(p99 <= 1000), f"p99 {fmt(p99, ',.0f')} ms, max {fmt(med(n, 'lag_max_ms'), ',.0f')} ms over "
                                                 f"{fmt(med(n, 'appends'), ',.0f')} appends per run"))
    else:
        rows.append((target, *not_measured("appends")))

    L = ["## Targets of issue 21 (this run)\n",
         "Computed from the tables above like issue 8's. Single appends are met only at every client count and with "
         "the lone append's p50 within the bound. The batch target is judged against the inline design's ceiling "
         "(the events and their projection rows, same tables and indexes), by the batch row with the best ratio. "
         "Reads are met when both the throughput share and the p99 bound hold. \"Flat in ledger size\" compares the "
         "report times on the smallest and the largest ledger of `BENCH_EVENTS` (e.g. `1000000,10000000`); a run "
         "of one size shows the report times at its own size only.\n",
         "| target | state | figures of this run |", "|---|---|---|"]
    L += [f"| {t} | {st} | {f} |" for t, st, f in rows]
    return "\n".join(L)



# ---- Issue 38: webhook deliveries and store messages --------------------------------------------------------

def call(server, method, path, key, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.base + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read()
    return json.loads(raw) if raw else {}


class Receiver:
    """tools/bench.d/receiver.py in its own process: answers 204 at once, remembers arrival and recorded_at."""
    def __init__(self):
        tag = uuid.uuid4().hex[:8]
        self.port_file, self.out = os.path.join(SCRATCH, f"recv-{tag}.port"), os.path.join(SCRATCH, f"recv-{tag}.json")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "receiver.py"), self.port_file, self.out])
        for _ in range(100):
            if os.path.exists(self.port_file) and open(self.port_file).read():
                break
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{open(self.port_file).read()}/hook"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(60)
        with open(self.out) as f:
            return json.load(f)


def bench_event(tag, i):
    return {"subscriber_id": f"w{i % 5000}", "type": "purchase", "occurred_at": "2026-03-01T10:00:00Z", "source": "bench",
            "environment": "production", "idempotency_key": f"{tag}-{i}",
            "data": {"product_id": "pro.monthly", "entitlements": ["pro"], "transaction_id": f"{tag}-{i}", "kind": "auto_renewable",
                     "period_start": "2026-03-01T10:00:00Z", "period_end": "2026-04-01T10:00:00Z", "period": "P1M",
                     "price_minor": 999, "currency": "USD", "commission_rate": "0.30"}}


def wait_delivered(server, admin, ids, limit=600, start=None):
    """Seconds (from `start`, default now) until every endpoint's cursor is at the feed's head (None past `limit`)."""
    start = start or time.monotonic()
    while time.monotonic() - start < limit:
        if all(call(server, "GET", f"/v1/webhooks/{i}", admin)["lag_positions"] == 0 for i in ids):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def deliveries():
    """Deliveries/s to one fast receiver and to ten (a replay of the whole feed), and the lag from append to
    delivery while wrk appends at 64 clients."""
    url = fresh_db("subledger_bench_delivery")
    writer, admin = key(url, "writer"), key(url, "admin")
    server = Server(url, extra=["--webhooks-allow-http", "--webhooks-allow-private"])
    try:
        tag = uuid.uuid4().hex[:8]
        for i in range(0, WEBHOOK_EVENTS, 500):
            call(server, "POST", "/v1/events", writer, {"events": [bench_event(tag, j) for j in range(i, min(i + 500, WEBHOOK_EVENTS))]})
        for run in range(RUNS):
            settle([url])
            log(f"webhook delivery, run {run + 1}/{RUNS}")
            for fanout in (1, WEBHOOK_FANOUT):
                receivers = [Receiver() for _ in range(fanout)]
                ids = [call(server, "POST", "/v1/webhooks", admin, {"url": r.url})["id"] for r in receivers]
                last = call(server, "GET", f"/v1/webhooks/{ids[0]}", admin)["delivered_through"]
                start = time.monotonic()
                for i in ids:
                    call(server, "POST", f"/v1/webhooks/{i}/replay", admin, {"from_position": 1})
                took = wait_delivered(server, admin, ids, start=start)
                got = sum(r.stop()["count"] for r in receivers)
                for i in ids:
                    call(server, "DELETE", f"/v1/webhooks/{i}", admin)
                record(f"webhooks replay x{fanout}", {"messages": got, "seconds": took or 0,
                                                       "mps": (last * fanout / took) if took else None})
            receiver = Receiver()
            hook = call(server, "POST", "/v1/webhooks", admin, {"url": receiver.url})["id"]
            env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": "1", "BENCH_TAG": uuid.uuid4().hex[:8]}
            r = wrk(server, "bench.lua", 64, env)
            caught_up = wait_delivered(server, admin, [hook])
            got = receiver.stop()
            call(server, "DELETE", f"/v1/webhooks/{hook}", admin)
            record("webhooks lag x64", {"eps": r["rps"], "delivered": got["count"], "lag_p50_ms": pct(got["lags_ms"], 50),
                                        "lag_p99_ms": pct(got["lags_ms"], 99), "catch_up_s": caught_up})
    finally:
        server.close()


def google_oidc(folder):
    """A local OIDC key published as a JWKS file and a token for Pub/Sub's push (as tools/smoke makes them)."""
    import base64
    b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    pem = os.path.join(folder, "oidc.pem")
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pem], check=True, capture_output=True)
    mod = subprocess.run(["openssl", "rsa", "-in", pem, "-noout", "-modulus"], capture_output=True, text=True, check=True).stdout
    with open(os.path.join(folder, "jwks.json"), "w") as f:
        json.dump({"keys": [{"kid": "bench", "kty": "RSA", "alg": "RS256", "n": b64(bytes.fromhex(mod.strip().split("=")[1])), "e": "AQAB"}]}, f)
    now = int(time.time())
    h = b64(json.dumps({"alg": "RS256", "kid": "bench", "typ": "JWT"}).encode())
    c = b64(json.dumps({"iss": "https://accounts.google.com", "aud": "bench-audience", "email": "push@bench.iam.gserviceaccount.com",
                        "email_verified": True, "iat": now, "exp": now + 3600}).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", pem], input=(h + "." + c).encode(), capture_output=True, check=True).stdout
    return h + "." + c + "." + b64(sig)


def store_bodies(store, count, writer, ca, token):
    """`count` distinct requests of one store for bodies.lua: PATH, headers, body (tab-separated lines)."""
    import base64
    path = os.path.join(SCRATCH, f"bodies-{store}.tsv")
    now = time.gmtime()
    with open(path, "w") as f:
        if store == "apple":
            out = subprocess.run([BIN, "apple", "test-notification", "--ca-dir", ca, "--type", "SUBSCRIBED", "--subtype", "INITIAL_BUY",
                                  "--transaction-id", f"b{uuid.uuid4().hex[:8]}", "--product-id", "pro.monthly",
                                  "--purchase-date", time.strftime("%Y-%m-%dT%H:%M:%SZ", now),
                                  "--expires-date", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * 86400)),
                                  "--count", str(count)], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                f.write(f"/v1/stores/apple/notifications\tAuthorization: Bearer {writer}\t{line}\n")
        elif store == "stripe":
            out = subprocess.run([os.path.join(ROOT, "tools", "stripe-sign"), "--secret", "whsec_bench", "--print", "--live",
                                  "--subscriber", f"s{uuid.uuid4().hex[:8]}", "--count", str(count)],
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                header, body = line.split("\t", 1)
                f.write(f"/v1/stores/stripe/webhooks\tStripe-Signature: {header}\t{body}\n")
        else:
            tag = uuid.uuid4().hex[:8]
            millis = str(int(time.time() * 1000))
            for i in range(count):
                n = {"version": "1.0", "packageName": "com.example.bench", "eventTimeMillis": millis,
                     "subscriptionNotification": {"version": "1.0", "notificationType": 4, "purchaseToken": f"tok-{tag}-{i}",
                                                  "subscriptionId": "pro.monthly"}}
                body = json.dumps({"message": {"data": base64.b64encode(json.dumps(n).encode()).decode(), "messageId": f"{tag}-{i}"},
                                   "subscription": "projects/bench/subscriptions/rtdn"}, separators=(",", ":"))
                f.write(f"/v1/stores/google/notifications\tAuthorization: Bearer {token}\t{body}\n")
    return path


def store_messages():
    """Messages/s per store at 8 clients (the store's proof checked on each: JWS chain, OIDC token, signature)
    next to plain appends at 8 clients in the same run."""
    url = fresh_db("subledger_bench_stores")
    writer, admin = key(url, "writer"), key(url, "admin")
    folder = os.path.join(SCRATCH, "stores"); shutil.rmtree(folder, ignore_errors=True); os.makedirs(folder)
    ca = os.path.join(folder, "apple-ca")
    store_bodies("apple", 1, writer, ca, None)  # creates the test CA
    token = google_oidc(folder)
    server = Server(url, extra=["--apple-root-cert", os.path.join(ca, "root.der"), "--stripe-webhook-secret", "whsec_bench",
                                "--google-package-name", "com.example.bench", "--google-pubsub-audience", "bench-audience",
                                "--google-pubsub-service-account", "push@bench.iam.gserviceaccount.com",
                                "--google-oidc-jwks", os.path.join(folder, "jwks.json")])
    try:
        call(server, "PUT", "/v1/catalog/products/pro.monthly", admin,
             {"entitlements": ["pro"], "kind": "auto_renewable", "period": "P1M", "price_minor": 999, "currency": "USD",
              "commission_rate": "0.30"})
        count = int(1500 * SECS)
        for run in range(RUNS):
            settle([url])
            log(f"store messages, run {run + 1}/{RUNS}")
            env = {"BENCH_MODE": "append", "BENCH_KEY": writer, "BENCH_BATCH": "1", "BENCH_TAG": uuid.uuid4().hex[:8]}
            r = wrk(server, "bench.lua", STORE_CLIENTS, env)
            record(f"store plain x{STORE_CLIENTS}", {"mps": r["rps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "errors": r["errors"]})
            for store in ("apple", "google", "stripe"):
                bodies = store_bodies(store, count, writer, ca, token)
                r = wrk(server, "bodies.lua", STORE_CLIENTS, {"BENCH_BODIES": bodies, "BENCH_THREADS": str(min(2, STORE_CLIENTS))})
                record(f"store {store} x{STORE_CLIENTS}", {"mps": r["rps"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                                                            "errors": r["errors"], "wrapped": r.get("wrapped", 0)})
    finally:
        server.close()


def flow_tables(w, run):
    if any(n in results for n in ("webhooks replay x1", "webhooks lag x64")):
        w(f"Webhook delivery to fast local receivers (`tools/bench.d/receiver.py`: asyncio, 204 at once, keep-alive), with "
          f"`serve`'s default delivery settings. **Replay**: the whole feed ({5000 if run['quick'] else 20000:,} events, plus what "
          "earlier runs' lag scenarios appended), an endpoint per receiver replayed from position 1, timed until every cursor reaches the head. **Lag**: one endpoint at the head while wrk appends "
          "single events at 64 clients; lag = arrival at the receiver − the event's `recorded_at`; catch-up = seconds "
          "after wrk stops until the cursor reaches the head.\n")
        w("| scenario | messages/s | lag p50 ms | lag p99 ms | catch-up s | appends/s meanwhile |")
        w("|---|---:|---:|---:|---:|---:|")
        for f in (1, WEBHOOK_FANOUT):
            n = f"webhooks replay x{f}"
            if n in results:
                w(f"| replay to {f} endpoint{'s' if f > 1 else ''} | {fmt(med(n, 'mps'), ',.0f')} | – | – | – | – |")
        n = "webhooks lag x64"
        if n in results:
            w(f"| appends at 64 clients, 1 endpoint | – | {fmt(med(n, 'lag_p50_ms'), ',.0f')} | {fmt(med(n, 'lag_p99_ms'), ',.0f')} | "
              f"{fmt(med(n, 'catch_up_s'), '.2f')} | {fmt(med(n, 'eps'), ',.0f')} |")
        w("")
    if f"store plain x{STORE_CLIENTS}" in results:
        w(f"Store messages at {STORE_CLIENTS} clients (wrk, each request a distinct message: `tools/bench.d/bodies.lua`), next to plain "
          "single appends in the same run: App Store notifications signed by a local test chain (JWS x5c verified to the "
          "configured root on each), Google Pub/Sub pushes with an RS256 OIDC token checked against a local JWKS (answered "
          "once recorded in the inbox; no service account, so none is resolved against the Play API), Stripe `invoice.paid` "
          "with `Stripe-Signature` (HMAC) naming `subscriber_id` in the subscription's metadata (applied).\n")
        w("| path | messages/s | p50 ms | p99 ms | / plain appends | errors | wrapped |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        plain = f"store plain x{STORE_CLIENTS}"
        w(f"| plain `POST /v1/events` | {fmt(med(plain, 'mps'), ',.0f')} | {fmt(med(plain, 'p50_ms'), '.2f')} | "
          f"{fmt(med(plain, 'p99_ms'), '.2f')} | 100% | {sum(r['errors'] for r in results[plain])} | – |")
        for store in ("apple", "google", "stripe"):
            n = f"store {store} x{STORE_CLIENTS}"
            if n in results:
                w(f"| {store} | {fmt(med(n, 'mps'), ',.0f')} | {fmt(med(n, 'p50_ms'), '.2f')} | {fmt(med(n, 'p99_ms'), '.2f')} | "
                  f"{fmt(paired_ratio(n, 'mps', plain, 'mps'), '.0%')} | {sum(r['errors'] for r in results[n])} | "
                  f"{sum(r.get('wrapped', 0) for r in results[n])} |")


def main():
    out = os.environ.get("BENCH_OUT") or os.path.join(ROOT, "BENCHMARKS.md")
    saved_path = os.environ.get("BENCH_RENDER")
    if saved_path:
        with open(saved_path) as f:
            saved = json.load(f)
        if "run" in saved and "results" in saved:
            run = saved["run"]
            results.update(saved["results"])
        else:  # a results.json from before the run's settings were saved with it
            results.update(saved)
            run = dict(run_info(), at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.path.getmtime(saved_path))),
                       only=[p for p, n in [("appends", "group commit"), ("bulk", "import")] if n in saved])
            log("this results.json does not hold the run's settings: the header shows this environment's")
        log(f"rendering {saved_path} (nothing measured)")
    else:
        missing = [v for v in ("BENCH_BIN", "DATABASE_URL") if not os.environ.get(v)]
        if missing:
            sys.exit(f"run.py: {' and '.join(missing)} not set (tools/bench sets them; "
                     "BENCH_RENDER=path/to/results.json only renders saved figures)")
        os.makedirs(SCRATCH, exist_ok=True)
        if "appends" in ONLY:
            appends()
        if "bulk" in ONLY:
            bulk()
            for events in SIZES[1:]:
                reports_at(events)
        elif "reports" in ONLY:
            # Only the reports, on every size: each ledger imported once, then every report timed RUNS times.
            for events in SIZES:
                reports_at(events)
        if "delivery" in ONLY:
            deliveries()
        if "stores" in ONLY:
            store_messages()
        run = run_info()
        with open(os.path.join(SCRATCH, "results.json"), "w") as f:
            json.dump({"run": run, "results": results}, f, indent=1)
    tables = report(run)
    text = tables
    notes = os.environ.get("BENCH_NOTES", os.path.join(HERE, "notes.md"))
    if notes and os.path.exists(notes):
        text += "\n" + open(notes).read()
    # Issue 19's section comes from its own run (tools/bench-scaling) and is kept as it was measured.
    scaling = os.path.join(HERE, "scaling.md")
    if os.path.exists(scaling):
        text = text.rstrip("\n") + "\n\n<!-- scaling:begin -->\n" + open(scaling).read() + "<!-- scaling:end -->\n"
    with open(out, "w") as f:
        f.write(text)
    print(tables)
    log(f"wrote {out}" + (f" (the tables and targets above, then {os.path.relpath(notes, ROOT)})" if notes and os.path.exists(notes) else ""))


if __name__ == "__main__":
    main()
